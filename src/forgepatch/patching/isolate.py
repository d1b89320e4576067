"""Run a custom patch's code in a child process (``os.fork``): whatever the patch does there
(``os._exit``, a signal, a segfault in a C extension, a C-level loop that holds the GIL, a
memory bomb) ends the child, not forgepatch. At the time limit the child's own alarm raises where
the patch's code is (so the one line names file:line); a short grace later the parent kills the
child (SIGKILL, not a flag the patch could ignore: a C-level loop ends without a line). The
child's memory is capped (RLIMIT_AS) and file writes are refused (RLIMIT_FSIZE 0: writing data
to any file fails); the child's only output is its result, pickled back through a pipe. Any end of the child that is not a result is one line of
bad input naming the patch file. In the child, and in the parent's thread that imports the
patch, an audit hook refuses the patch's code every file change (remove, rename, chmod, a
file opened for writing), every program start and native library load: ``guard_thread``."""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from forgepatch.errors import BadInput, ForgepatchError, located

# Audit events (PEP 578) of what changes files, starts programs or loads native code: a
# patch's code, in its child and while the parent imports it, is refused each of them
# (PermissionError, which the patch's result carries as its failure). This holds for code
# that goes through Python; a patch is code the fork reviews, and this stops the careless
# and the naively hostile one (`shutil.rmtree` at import), not an attacker with ctypes
# already loaded by someone else.
_REFUSED_EVENTS = frozenset({
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate", "os.symlink",
    "os.link", "os.utime", "os.chflags", "os.lchflags", "os.setxattr", "os.removexattr", "os.mkfifo", "os.mknod",
    "shutil.rmtree", "shutil.move", "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.chown",
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen", "pty.spawn",
    "os.kill", "os.killpg", "signal.pthread_kill", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function",
    "_thread.start_new_thread", "os.startfile", "os.add_dll_directory",
    # a socket reaches what the patch may not touch itself (the Docker engine's socket, a registry,
    # a download); binding a unix socket creates a file
    "socket.bind", "socket.connect", "socket.sendto", "socket.sendmsg",
    "sqlite3.enable_load_extension", "sqlite3.load_extension",
})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_guarded: set[int] = set()  # thread idents the audit hook holds (the hook itself cannot be removed)
_everywhere = False  # a patch's child: every thread, for good
_hooked = False


def _audit(event: str, args: tuple) -> None:
    import threading

    if not _everywhere and threading.get_ident() not in _guarded:
        return
    if event == "_thread.start_new_thread" and _everywhere:
        return  # a thread of the child is held as well
    if event in _REFUSED_EVENTS:
        raise PermissionError(f"a patch may not {event.replace('.', ' ', 1)} (forgepatch runs patch code read-only)")
    if event == "open" and len(args) >= 3 and isinstance(args[2], int) and args[2] & _WRITE_FLAGS:
        raise PermissionError(f"a patch may not open {args[0]!r} for writing (forgepatch runs patch code read-only)")
    if event == "sqlite3.connect" and args and str(args[0]) not in (":memory:", ""):
        # SQLite opens (and creates) its file in C, past the "open" event
        raise PermissionError(f"a patch may not open the database {args[0]!r} (forgepatch runs patch code read-only)")


def guard_thread(everywhere: bool = False) -> Callable[[], None]:
    """Refuse this thread (``everywhere``: every thread, for good) every event of
    ``_REFUSED_EVENTS`` and opening a file for writing, until the returned release is called."""
    import threading

    global _hooked, _everywhere
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True
    if everywhere:
        _everywhere = True
    ident = threading.get_ident()
    _guarded.add(ident)
    return lambda: _guarded.discard(ident)


MEMORY_LIMIT = 8 << 30  # bytes of address space a patch's process may map (libcst trees are big)
EDIT_LIMIT_S = 120.0  # one edit_function / finalize_module call


class _OutOfTime(BaseException):
    """Raised in the child by its own alarm, just before the parent's kill: it carries where the
    patch's code was, so the one line names file:line (a C-level loop never sees it; the kill
    still ends it, without a line)."""

    def __init__(self, line: int | None) -> None:
        super().__init__(line)
        self.line = line


def runs_in(path: Path) -> Callable[[str], bool]:
    """Is a code object's file name ``path``? Each name resolved once (a runaway recursion is
    20000 frames of one file)."""
    target = os.path.realpath(path)
    real: dict[str, bool] = {}

    def test(name: str) -> bool:
        if name not in real:
            real[name] = os.path.realpath(name) == target
        return real[name]

    return test


def frame_line(path: Path, frame) -> int | None:
    """The line of the innermost frame of ``frame``'s stack that runs code of ``path``."""
    ours = runs_in(path)
    while frame is not None:
        if ours(frame.f_code.co_filename):
            return frame.f_lineno
        frame = frame.f_back
    return None


def _child(fn: Callable[[], Any], w: int, memory: int, path: Path, alarm_s: float) -> None:
    import resource

    done = []

    def out_of_time(_sig, frame) -> None:
        if done:
            return
        line = None
        for stack in (frame, *sys._current_frames().values()):  # this thread's, then an import's thread
            line = frame_line(path, stack)
            if line is not None:
                break
        raise _OutOfTime(line)

    try:
        try:
            signal.signal(signal.SIGALRM, out_of_time)
            signal.setitimer(signal.ITIMER_REAL, alarm_s)
        except ValueError:  # not the main thread: the parent's kill alone ends it, without a line
            pass
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write fails with EFBIG instead of killing
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
        sys.dont_write_bytecode = True  # the import itself must not need a write
        try:
            guard_thread(everywhere=True)  # for good: the child ends after fn
            value = fn()
            done.append(True)
            result: tuple = ("ok", value)
        except _OutOfTime as exc:
            result = ("timeout", exc.line)
        except ForgepatchError as exc:
            result = ("error", str(exc), exc.exit_code)
        except MemoryError:
            result = ("error", "", -1)
        except BaseException as exc:  # noqa: BLE001 - reported as the patch's own failure
            alarm = exc.__context__
            if isinstance(alarm, _OutOfTime):  # the alarm, caught and replaced by the patch
                result = ("timeout", alarm.line)
            else:
                result = ("raised", f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
        done.append(True)
        try:
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001
            data = pickle.dumps(("raised", f"its result cannot be carried out of its process ({type(exc).__name__})"))
        view = memoryview(len(data).to_bytes(8, "big") + data)
        while view:
            view = view[os.write(w, view):]
    finally:
        os._exit(0)


def run_isolated(path: Path, what: str, fn: Callable[[], Any], *, limit: float, line: int | None = None,
                 memory: int = MEMORY_LIMIT, on_timeout: Callable[[], str] | None = None) -> Any:
    """``fn()`` in a forked child; its return value (pickled). ``what`` names the step in
    messages (``importing the patch``, ``patch ID: edit_function``)."""
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        _child(fn, w, memory, path, limit)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + limit + min(2.0, max(0.5, limit * 0.2))  # the child's alarm comes first
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([r], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(r, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(r)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    size = int.from_bytes(data[:8], "big") if len(data) >= 8 else -1
    result = pickle.loads(data[8:]) if size >= 0 and len(data) - 8 == size else None
    if timed_out or (result is not None and result[0] == "timeout"):
        where = result[1] if result is not None and result[0] == "timeout" and result[1] is not None else line
        raise BadInput(located(path, where, f"{what} took more than {limit:g} s (killed)"
                               + (f"; {on_timeout()}" if on_timeout else "")))
    if result is None:
        raise BadInput(located(path, line, f"{what}: {_ending(status)} before giving a result"))
    if result[0] == "ok":
        return result[1]
    if result[0] == "error":
        if result[2] == -1:
            raise BadInput(located(path, line, f"{what}: ran out of memory (limit {memory >> 20} MiB)"))
        raise BadInput(result[1])
    raise BadInput(located(path, line, f"{what} raises {result[1]}"))


def _ending(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"the patch's process was killed by {name}" + (" (out of memory?)" if sig == signal.SIGKILL else "")
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return f"the patch's process exited (status {code}, e.g. os._exit)"
