"""The CLI's consoles: one rule for colour, width and wrapping in every command.

- Colour (``--color``): ``auto`` (default) colours a terminal unless ``NO_COLOR`` is set
  (https://no-color.org); ``FORCE_COLOR`` (set, not empty, not ``0``) colours pipes too, and
  ``NO_COLOR`` wins over it; ``always`` / ``never`` override both.
- ``-q``: the consoles print nothing (errors and ``--json`` go around them).
- On a terminal: rich's own width.
- Not a terminal (a pipe, a file, CI): no colour, no control codes, and no wrapping: a long
  line stays one line (a hash never lands on a line of its own, ``grep`` sees whole lines).
  Tables get a wide virtual width instead of 80 columns.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# The width a table is laid out at when output is not a terminal (no wrapping of plain lines
# at all; a table still needs some width to lay out its columns).
PIPE_WIDTH = 4000


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


COLOR_MODES = ("auto", "always", "never")
SETTINGS: dict[str, Any] = {"color": "auto", "quiet": False}  # set by the global options


def wants_color(tty: bool, mode: str | None = None, environ=None) -> bool:
    """The colour rule above, in one place."""
    env = os.environ if environ is None else environ
    mode = mode or SETTINGS["color"]
    if mode != "auto":
        return mode == "always"
    if env.get("NO_COLOR", "") != "":
        return False
    if env.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    return tty


def make_console(stderr: bool = False) -> Any:
    """A rich Console on stdout (or stderr) following the rules above."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = _isatty(stream)
    color = wants_color(tty)
    quiet = bool(SETTINGS["quiet"])
    if tty:
        return Console(stderr=stderr, highlight=False, no_color=not color, quiet=quiet)
    return _PipeConsole(stderr=stderr, highlight=False, no_color=not color,
                        color_system="standard" if color else None, width=PIPE_WIDTH,
                        soft_wrap=True, force_terminal=color, quiet=quiet)


def _pipe_console_class():
    from rich.console import Console

    class PipeConsole(Console):
        """Not a terminal: lines are never wrapped, tables are laid out then right-stripped."""

        def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: A003 - rich's name
            if self.quiet:  # -q
                return
            kwargs.setdefault("soft_wrap", True)
            if any(_is_renderable_box(o) for o in objects):
                # a table at PIPE_WIDTH: render it then strip the padding rich adds to the width
                with self.capture() as cap:
                    super().print(*objects, **{**kwargs, "soft_wrap": False})
                text = "\n".join(line.rstrip() for line in cap.get().splitlines())
                self.file.write(text + "\n")
                return
            super().print(*objects, **kwargs)

    return PipeConsole


def _is_renderable_box(obj: Any) -> bool:
    return not isinstance(obj, str) and hasattr(obj, "__rich_console__")


class _Lazy:
    cls: Any = None


def _PipeConsole(**kwargs: Any) -> Any:  # noqa: N802 - a class factory
    if _Lazy.cls is None:
        _Lazy.cls = _pipe_console_class()
    return _Lazy.cls(**kwargs)
