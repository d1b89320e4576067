"""The local runner: start the probe (or any command) as a subprocess on this host, stream its
output line by line, enforce a timeout, and parse the JSON document it prints.

For hosts without Docker (like the lent GPU machines). The Docker runner lives in
``forgepatch.smoke.docker_runner`` and returns the same ``JobResult``. Standard library only.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

# ``on_line(stream, line)``: stream is "stdout" or "stderr"; line has no trailing newline.
LineCallback = Callable[[str, str], None]


@dataclass
class JobResult:
    """How one job ended: exit code (None if it had to be killed), its JSON document if it
    printed one, and whether it timed out or was interrupted."""

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
    """The JSON object a job printed on stdout: the whole of it, or else the last line-start
    ``{`` from which the rest parses (tolerates chatter printed before the document)."""
    text = stdout.strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
        return doc if isinstance(doc, dict) else None
    except ValueError:
        pass
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("{"):
            try:
                doc = json.loads("\n".join(lines[i:]))
            except ValueError:
                continue
            return doc if isinstance(doc, dict) else None
    return None


def _kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the job's whole process group (the probe's rank processes too), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; sweep the group in case children outlived it.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


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
) -> JobResult:
    """Run ``command`` in its own process group; stream each line of stdout and stderr to
    ``on_line`` and, in arrival order, to ``log_path``; kill the group at ``timeout_s`` or on
    Ctrl-C. Never raises for the job's failure."""
    cmd = [str(c) for c in command]
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    log = None
    if log_path is not None:
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "w", encoding="utf-8")
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=full_env, cwd=cwd, start_new_session=True,
                            text=True, encoding="utf-8", errors="replace", bufsize=1)
    lines: queue.Queue = queue.Queue()

    def pump(stream: Any, name: str) -> None:
        for line in stream:
            lines.put((name, line.rstrip("\n")))
        lines.put((name, None))

    threads = [threading.Thread(target=pump, args=(proc.stdout, "stdout"), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, "stderr"), daemon=True)]
    for t in threads:
        t.start()
    out: list[str] = []
    tail: list[str] = []
    open_streams, timed_out, interrupted = 2, False, False

    def consume(name: str, line: str) -> None:
        (out if name == "stdout" else tail).append(line)
        if len(tail) > tail_lines:
            del tail[0]
        if log is not None:
            log.write(line + "\n")
            log.flush()
        if on_line is not None:
            on_line(name, line)

    try:
        while open_streams:
            remaining = timeout_s - (time.monotonic() - start)
            if remaining <= 0:
                timed_out = True
                break
            try:
                name, line = lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if line is None:
                open_streams -= 1
            else:
                consume(name, line)
    except KeyboardInterrupt:
        interrupted = True
    if timed_out or interrupted:
        _kill_group(proc, kill_grace_s)
    try:
        code = proc.wait(timeout=10 if not (timed_out or interrupted) else 5)
    except subprocess.TimeoutExpired:  # streams closed but the leader lingers
        _kill_group(proc, kill_grace_s)
        code = proc.wait()
    for t in threads:
        t.join(1.0)
    while True:  # lines that arrived while killing
        try:
            name, line = lines.get_nowait()
        except queue.Empty:
            break
        if line is not None:
            consume(name, line)
    if log is not None:
        log.close()
    stdout = "\n".join(out)
    return JobResult(cmd, None if (timed_out or interrupted) else code, time.monotonic() - start,
                     timed_out=timed_out, interrupted=interrupted, document=parse_document(stdout),
                     stdout=stdout, stderr_tail=tail, log_path=log_path)


def probe_command(*, arch: str | None = None, gpus: int = 1, replays: int | None = None,
                  deadline: float | None = None, python: str | None = None) -> list[str]:
    """The command line that runs the probe with this interpreter, asking for JSON."""
    cmd = [python or sys.executable, "-m", "forgepatch.smoke.probe", "--json", "--gpus", str(gpus)]
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
    src = str(Path(__file__).resolve().parents[2])
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if src not in parts:
        env["PYTHONPATH"] = os.pathsep.join([src, *parts])
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    env.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    return env
