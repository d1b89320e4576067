"""Run the probe (or any command) as a process on this host for ``forgepatch probe``: stream its
stdout and stderr line by line, enforce a timeout, and parse the JSON document it prints.

For hosts without Docker (like the lent GPU machines). Starting, streaming and stopping the
process tree is ``forgepatch.inimage.process`` (shared with the smoke matrix's local runner in
``forgepatch.smoke.jobs``); this module adds the probe's command line, environment and result.
Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from forgepatch.inimage.monitor import extract_json
from forgepatch.inimage.process import LineCallback, follow_session, start_session
from forgepatch.paths import PACKAGE_DIR


@dataclass
class ProcessResult:
    """What ``run_local`` saw of one process: exit code (None if it had to be stopped), its
    stdout, the tail of its stderr, its JSON document if it printed one, and whether it timed
    out or was interrupted. (The smoke matrix's verdict per job is ``jobs.JobResult``.)"""

    command: list[str]
    exit_code: int | None
    seconds: float
    timed_out: bool = False
    interrupted: bool = False
    document: dict[str, Any] | None = None
    stdout: str = ""
    stderr_tail: list[str] = field(default_factory=list)
    log_path: Path | None = None

    @property
    def last_phase(self) -> str | None:
        """The last ``phase=...`` a ``[forgepatch-probe]`` log line named."""
        for line in reversed(self.stderr_tail):
            if "phase=" in line:
                return line.split("phase=", 1)[1].split()[0]
        return None


def parse_document(stdout: str) -> dict[str, Any] | None:
    """The JSON object a job printed on stdout (the same rule ``forgepatch smoke`` uses:
    the last object starting at a line start; chatter before or after it is ignored)."""
    return extract_json(stdout)


def run_local(
    command: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    on_line: LineCallback | None = None,
    log_path: str | Path | None = None,
    kill_grace_s: float = 3.0,
    tail_lines: int = 200,
) -> ProcessResult:
    """Run ``command`` in its own session (``process.start_session``); stream each line of
    stdout and stderr to ``on_line`` and, in arrival order, to ``log_path``; stop the whole
    session at ``timeout_s`` or on Ctrl-C. Never raises for the job's failure."""
    cmd = [str(c) for c in command]
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    out: list[str] = []
    tail: deque[str] = deque(maxlen=tail_lines)
    log = None
    if log_path is not None:
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "w", encoding="utf-8")

    def consume(name: str, line: str) -> None:
        (out if name == "stdout" else tail).append(line)
        if log is not None:
            log.write(line + "\n")
            log.flush()
        if on_line is not None:
            on_line(name, line)

    try:
        ended = follow_session(start_session(cmd, env=full_env, cwd=cwd), on_line=consume,
                               timeout_s=timeout_s, stop_grace_s=kill_grace_s)
    finally:
        if log is not None:
            log.close()
    stdout = "\n".join(out)
    return ProcessResult(cmd, None if ended.stopped else ended.returncode, ended.seconds,
                         timed_out=ended.timed_out, interrupted=ended.interrupted,
                         document=parse_document(stdout), stdout=stdout, stderr_tail=list(tail),
                         log_path=log_path)


def probe_command(*, arch: str | None = None, gpus: int = 1, replays: int | None = None,
                  deadline: float | None = None, python: str | None = None) -> list[str]:
    """The command line that runs the probe with this interpreter, asking for JSON."""
    cmd = [python or sys.executable, "-m", "forgepatch.inimage.probe", "--json", "--gpus", str(gpus)]
    if arch:
        cmd += ["--arch", arch]
    if replays is not None:
        cmd += ["--replays", str(replays)]
    if deadline is not None:
        cmd += ["--deadline", str(deadline)]
    return cmd


def probe_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a probe subprocess: this one, with forgepatch importable (the
    directory holding this package on PYTHONPATH) and NVLink multicast kept off."""
    env = dict(os.environ if base is None else base)
    src = str(PACKAGE_DIR.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if src not in parts:
        env["PYTHONPATH"] = os.pathsep.join([src, *parts])
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    env.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    return env
