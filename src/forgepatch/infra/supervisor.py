"""The ``forgepatch`` process runs each command in a forked worker, so that a crash of native
code (libcst's parser is Rust; a segfault or an abort there would otherwise end the CLI with
no word) is one line naming the file it was reading, exit 2 (issue 28 item 4).

The parent does nothing but wait: it relays signals sent to it alone (``kill PID``, a CI
runner's SIGTERM) to the worker and ignores the copies a terminal sends to the whole process
group (Ctrl-C reaches the worker directly), so the worker sees each signal once, as the CLI
did before. The worker dies with its parent (``PR_SET_PDEATHSIG``). The parent exits as the
worker did: its exit code, or the same signal re-raised (a SIGKILLed worker is a SIGKILLed
CLI to the caller), except for the crash signals below, which become the one-line error.

Where the worker was is a breadcrumb in a page of shared memory: :func:`note` records the
file handed to the parser (``patching.parselimits.check`` calls it before every libcst parse
of a source file). It costs a memory write; outside a supervised run it does nothing.
"""

from __future__ import annotations

import mmap
import os
import signal
import sys
from collections.abc import Callable

CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT})
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
SI_KERNEL = 0x80  # si_code of a signal the kernel sent (a terminal's Ctrl-C to the process group)
_PR_SET_PDEATHSIG = 1
_CRUMB_SIZE = 4096

_crumb: mmap.mmap | None = None  # the shared page, in the worker of a supervised run


def note(where: str) -> None:
    """Record ``where`` (a file's display path) as the file the worker is now reading."""
    if _crumb is None:
        return
    data = where.encode("utf-8", "replace")[: _CRUMB_SIZE - 2]
    _crumb[: len(data) + 1] = data + b"\0"


def _last_note(page: mmap.mmap) -> str:
    raw = bytes(page[:_CRUMB_SIZE])
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def crash_message(sig: int, where: str) -> str:
    """The one line for a worker that died of ``sig`` while ``where`` was the file noted last."""
    name = signal.Signals(sig).name
    if where:
        return (f"{where}: forgepatch crashed ({name}) in native code while reading this file "
                f"(the parser's limits did not catch it; rerun with --debug for the C-level traceback)")
    return f"internal error: forgepatch crashed ({name}) in native code (rerun with --debug for the C-level traceback)"


def _die_with_parent(parent: int) -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the worker outlives a SIGKILLed parent
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def run(work: Callable[[], int], debug: bool = False) -> int:
    """Run ``work`` in a forked worker; returns its exit code in the parent (where the
    worker died of a relayed or fatal signal other than a crash, the parent dies of it too).
    Without ``os.fork`` (not POSIX) ``work`` runs here."""
    global _crumb
    if not hasattr(os, "fork"):  # pragma: no cover - POSIX only
        return work()
    page = mmap.mmap(-1, _CRUMB_SIZE, flags=mmap.MAP_SHARED)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an inherited SIG_IGN would auto-reap the worker
    waited = {*RELAYED, signal.SIGCHLD}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the worker: the command itself
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        _die_with_parent(parent)
        _crumb = page
        if debug:
            import faulthandler

            faulthandler.enable()
        return work()
    status = _wait(pid, waited)
    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    sig = os.WTERMSIG(status)
    if sig in CRASH_SIGNALS:
        print(f"forgepatch: error: {crash_message(sig, _last_note(page))}", file=sys.stderr)
        return 2
    if sig != signal.SIGKILL:  # end the way the worker ended (SIGKILL, SIGTERM, ...)
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    os.kill(os.getpid(), sig)
    return 128 + sig  # pragma: no cover - a signal whose default action is not to end


def _wait(pid: int, waited: set[int]) -> int:
    """Wait for the worker, relaying the signals sent to this process alone."""
    while True:
        info = signal.sigwaitinfo(waited)
        if info.si_signo == signal.SIGCHLD:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return status
            continue
        if info.si_code == SI_KERNEL:
            continue  # from the terminal, to the whole process group: the worker has it already
        try:
            os.kill(pid, info.si_signo)
        except ProcessLookupError:
            pass  # it is ending: SIGCHLD follows
