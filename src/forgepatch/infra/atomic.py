"""Atomic file writes: a temp file beside the target, then one rename (never half-written).

Every file forgepatch writes goes through ``write_atomic``: reports, results, pins, the
ledger, bake files, build logs, build contexts, caches.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Hold off SIGINT/SIGTERM/SIGHUP (Ctrl-C, a stop) while a few renames run: a signal that
    arrives meanwhile is delivered when they are done. Clean-up code run by an interrupt can
    then never see (and delete) a half-swapped state; a SIGKILL is left to the journal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def refuse_special(path: Path) -> None:
    """OSError when ``path`` is something a write must never replace: a directory, device,
    FIFO or socket (or a symlink to one). The last line of defence behind
    ``paths.check_output``: run as root, ``--out /dev/stdout`` must not replace the device."""
    import errno
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError:
        return  # a loop, a dangling link: os.replace replaces the link itself, never its target
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise OSError(errno.EEXIST, f"is {kind}; refusing to replace it", str(path))


def stale_temps(directory: Path, name: str = "*") -> list[Path]:
    """The temp files ``write_atomic`` makes for ``directory/name`` (a glob): what a write
    killed before its rename leaves. Only a caller holding the lock every writer of those
    files takes may remove them (a live writer's temp file matches too)."""
    try:
        return sorted(p for p in Path(directory).glob(f".{name}.*.tmp") if p.is_file())
    except OSError:
        return []


def write_atomic(path: Path, data: bytes | str | Path, *, validate: Callable[[Path], object] | None = None,
                 durable: bool = False, exclusive: bool = False, mode: int | None = None,
                 mtime: float | None = None) -> None:
    """Write ``data`` to ``path`` atomically.

    ``data`` is bytes, text (UTF-8), or a file to copy (hard-linked when on the same disk: the
    source must never change in place). The file keeps the mode of the one it replaces (a new
    file gets the umask's default) unless ``mode`` is given; ``mtime`` fixes its modification
    time; ``validate(tmp)`` may reject the new content before anything is replaced;
    ``durable`` fsyncs the data and the directory; ``exclusive`` refuses (FileExistsError)
    when ``path`` exists, without a window in which another writer could be overwritten.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_special(path)
    tmp = None
    try:
        # Ctrl-C held off while the temp file is made: a KeyboardInterrupt raised between
        # mkstemp's open and its return would leave the file with nobody to remove it
        with uninterrupted():
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # stale_temps' names
        if isinstance(data, Path):
            os.close(fd)
            os.unlink(tmp)
            try:
                os.link(data, tmp)
            except OSError:
                shutil.copyfile(data, tmp)
            if durable:
                with open(tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
        else:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
        if mode is None:
            try:
                mode = path.stat().st_mode & 0o7777
            except OSError:
                mode = _default_mode()
        os.chmod(tmp, mode)
        if mtime is not None:
            os.utime(tmp, (mtime, mtime))
        if validate is not None:
            validate(Path(tmp))
        if exclusive:
            os.link(tmp, path)  # FileExistsError if it appeared meanwhile
        else:
            os.replace(tmp, path)
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    if durable:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
