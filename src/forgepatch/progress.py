"""Progress for slow steps (downloads, unpacking, scanning, drift revisions, audits).

Services open a :func:`task` around slow work and advance it; nothing is shown unless the
CLI turned progress on (:func:`enable`), which it does only when stderr is a terminal and
the command does not print ``--json``. So pipes, CI logs and JSON stay clean, and a library
caller sees nothing. The display is transient: it disappears when the work is done.
Rich is imported only when something is shown.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

_enabled = False
_console: Any = None  # where progress goes (the CLI's stderr console)
_progress: Any = None  # the shared rich Progress while at least one task is open
_open = 0


def enable(on: bool = True, console: Any = None) -> None:
    """Turn progress on (onto ``console``, a rich Console on stderr) or off."""
    global _enabled, _console
    _enabled = bool(on)
    _console = console


def enabled() -> bool:
    return _enabled


def wanted(argv: list[str], stderr: Any) -> bool:
    """The CLI's rule: a terminal on stderr, no ``--json``, and not ``TERM=dumb``."""
    import os

    try:
        tty = stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty and "--json" not in argv and os.environ.get("TERM") != "dumb"


class Bar:
    """A handle on one task; every method is a no-op when progress is off."""

    def __init__(self, progress: Any = None, task_id: Any = None) -> None:
        self._p, self._id = progress, task_id

    def advance(self, n: float = 1) -> None:
        if self._p is not None:
            self._p.advance(self._id, n)

    def update(self, description: str | None = None, total: float | None = None, completed: float | None = None) -> None:
        if self._p is None:
            return
        kwargs: dict[str, Any] = {}
        if description is not None:
            from rich.markup import escape

            kwargs["description"] = escape(description)
        if total is not None:
            kwargs["total"] = total
        if completed is not None:
            kwargs["completed"] = completed
        self._p.update(self._id, **kwargs)


def _start() -> Any:
    from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn)

    class _Amount(MofNCompleteColumn):
        """``3/12`` for counts, ``12.3/40.0 MB`` for bytes, nothing while the total is unknown."""

        def render(self, task):
            from rich.text import Text

            if task.total is None:
                return Text("")
            if task.fields.get("unit") == "bytes":
                return DownloadColumn().render(task)
            return super().render(task)

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), _Amount(), TimeElapsedColumn(),
                    console=_console or _stderr_console(), transient=True)


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


@contextmanager
def task(description: str, total: float | None = None, unit: str = "") -> Iterator[Bar]:
    """A progress line for the duration of the block (a spinner while ``total`` is None);
    ``unit="bytes"`` shows sizes. Nested tasks show one line each."""
    global _progress, _open
    if not _enabled:
        yield Bar()
        return
    from rich.markup import escape

    if _progress is None:
        _progress = _start()
        _progress.start()
    _open += 1
    progress = _progress
    task_id = progress.add_task(escape(description), total=total, unit=unit)
    try:
        yield Bar(progress, task_id)
    finally:
        if progress is _progress:  # not taken down by stop_all() meanwhile
            progress.remove_task(task_id)
            _open -= 1
            if _open == 0:
                progress.stop()
                _progress = None


def stop_all() -> None:
    """Take the display down now (a failing command: tasks of suspended generators may stay
    open until their frames go)."""
    global _progress, _open
    if _progress is not None:
        _progress.stop()
    _progress, _open = None, 0


def track(items: list, description: str) -> Iterator:
    """Iterate ``items`` with a counting bar."""
    with task(description, total=len(items)) as bar:
        for item in items:
            yield item
            bar.advance()
