"""Local processes, the one way: start in a fresh session, stream lines, stop the whole session.

Stdlib only. ``start_session`` starts a job as the leader of its own session; anything it
spawns (SGLang's schedulers, a server started in its own process group) stays in that session
unless it calls ``setsid`` itself, so ``stop_session`` can find every member through /proc and
end it: SIGTERM to all, a grace period, then SIGKILL to whoever is left. ``follow_session``
streams the job's lines to a callback, enforces the timeout and cancel, and always sweeps the
session when the job ends. ``forgepatch probe`` (``runners.run_local``) and the smoke local
runner (``local_runner.LocalRunner``) both run jobs this way.

``stop_group`` is for the one process that must stay inside its caller's session: the SGLang
server that ``forgepatch.inimage.server`` starts in its own process group, so that the job's
session sweep still reaches it if the driver dies.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

# ``on_line(stream, line)``: stream is "stdout" or "stderr"; line has no trailing newline.
LineCallback = Callable[[str, str], None]


# fields of /proc/PID/stat after the ")" that ends comm: state ppid pgrp session ...
_PGRP, _SESSION = 2, 3


def _members(field: int, ident: int) -> list[int]:
    """Live (not zombie) PIDs whose process group (``_PGRP``) or session (``_SESSION``) is
    ``ident`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and int(fields[field]) == ident and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def session_members(sid: int) -> list[int]:
    """PIDs whose session id is ``sid``."""
    return _members(_SESSION, sid)


def group_members(pgid: int) -> list[int]:
    """PIDs whose process group id is ``pgid``."""
    return _members(_PGRP, pgid)


def _signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _stop_members(members: Callable[[], list[int]], grace_s: float, proc: subprocess.Popen | None,
                  grace_until_leader_exits: bool = False) -> None:
    """SIGTERM all ``members()``, wait up to ``grace_s`` for them to go (or only for ``proc``,
    the leader, with ``grace_until_leader_exits``), then SIGKILL until none is left."""
    _signal_all(members(), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None and grace_until_leader_exits:
            break
        if not members():
            break
        time.sleep(0.05)
    for _ in range(50):
        left = members()
        if not left:
            break
        _signal_all(left, signal.SIGKILL)
        if proc is not None:
            proc.poll()
        time.sleep(0.02)
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def stop_session(sid: int, grace_s: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM every member of session ``sid``, wait up to ``grace_s``, SIGKILL the rest."""
    _stop_members(lambda: session_members(sid), grace_s, proc)


def stop_group(pgid: int, grace_s: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM process group ``pgid``, wait up to ``grace_s`` for its leader ``proc`` to exit,
    then SIGKILL whoever is left in the group (children that outlived their parent)."""
    _stop_members(lambda: group_members(pgid), grace_s, proc, grace_until_leader_exits=True)


def pump_lines(stream, on_line: Callable[[str], None]) -> threading.Thread:
    """Read ``stream`` (binary) line by line in a daemon thread, calling ``on_line`` per line."""

    def pump() -> None:
        for raw in iter(stream.readline, b""):
            on_line(raw.decode("utf-8", "replace").rstrip("\r\n"))
        stream.close()

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def start_session(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                  merge_stderr: bool = False) -> subprocess.Popen:
    """Start ``argv`` as the leader of a new session, stdin closed, stdout and stderr piped
    (binary; stderr into stdout with ``merge_stderr``). Raises OSError if it cannot start."""
    return subprocess.Popen(list(argv), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=None if env is None else dict(env), cwd=cwd,
                            start_new_session=True)


@dataclass
class ProcessExit:
    """How a session's leader ended: its return code (negative: the signal that ended it; None
    if it could not be reaped), the seconds it was followed, and whether it was stopped for the
    timeout or for a cancel (Ctrl-C or the ``cancel`` event)."""

    returncode: int | None
    seconds: float
    timed_out: bool = False
    interrupted: bool = False

    @property
    def stopped(self) -> bool:
        return self.timed_out or self.interrupted


def follow_session(proc: subprocess.Popen, *, on_line: LineCallback, timeout_s: float,
                   cancel: threading.Event | None = None, stop_grace_s: float = 10.0,
                   leftover_grace_s: float = 1.0) -> ProcessExit:
    """Follow ``proc`` (from ``start_session``) until its leader exits, ``timeout_s`` passes,
    ``cancel`` is set or Ctrl-C arrives; ``on_line`` gets every line, in arrival order, in the
    calling thread. Then, always, stop the whole session: ``stop_grace_s`` between SIGTERM and
    SIGKILL for a stopped job, ``leftover_grace_s`` for what a finished job left behind."""
    start = time.monotonic()
    lines: queue.Queue = queue.Queue()
    pumps = [pump_lines(stream, lambda line, name=name: lines.put((name, line)))
             for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)) if stream is not None]

    def deliver(wait: float) -> None:
        try:
            item = lines.get(timeout=wait) if wait > 0 else lines.get_nowait()
            for _ in range(1000):  # bounded, so a chatty job cannot starve the timeout check
                on_line(*item)
                item = lines.get_nowait()
        except queue.Empty:
            pass

    timed_out = interrupted = False
    try:
        while proc.poll() is None:
            if cancel is not None and cancel.is_set():
                interrupted = True
                break
            remaining = timeout_s - (time.monotonic() - start)
            if remaining <= 0:
                timed_out = True
                break
            deliver(min(remaining, 0.05))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop_session(proc.pid, stop_grace_s if (timed_out or interrupted) else leftover_grace_s, proc)
        for pump in pumps:
            pump.join(timeout=5)
    while not lines.empty():  # what arrived after the leader ended or while stopping
        deliver(0)
    return ProcessExit(proc.returncode, time.monotonic() - start, timed_out, interrupted)
