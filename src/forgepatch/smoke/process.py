"""Process-tree hygiene for local jobs: start in a fresh session, stop the whole session.

Stdlib only. A job started with ``start_session`` leads its own session; anything it spawns
(SGLang's schedulers, a server started in its own process group) stays in that session unless
it calls ``setsid`` itself, so ``stop_session`` can find every member through /proc and end it:
SIGTERM to all, a grace period, then SIGKILL to whoever is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Sequence


def session_members(sid: int) -> list[int]:
    """PIDs whose session id is ``sid`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # fields after the ")" that ends comm: state ppid pgrp session ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def _signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_session(sid: int, grace_s: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM every member of session ``sid``, wait up to ``grace_s``, SIGKILL the rest."""
    _signal_all(session_members(sid), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not session_members(sid):
            break
        time.sleep(0.05)
    for _ in range(50):
        left = session_members(sid)
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


def stop_group(pgid: int, grace_s: float = 10.0, alive: Callable[[], bool] | None = None) -> None:
    """SIGTERM process group ``pgid``, wait up to ``grace_s`` for ``alive()`` to turn false,
    then SIGKILL the group (always, to sweep children that outlived their parent)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while alive is not None and alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def pump_lines(stream, on_line: Callable[[str], None]) -> threading.Thread:
    """Read ``stream`` (binary) line by line in a daemon thread, calling ``on_line`` per line."""

    def pump() -> None:
        for raw in iter(stream.readline, b""):
            on_line(raw.decode("utf-8", "replace").rstrip("\r\n"))
        stream.close()

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread
