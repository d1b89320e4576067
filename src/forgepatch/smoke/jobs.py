"""Smoke jobs: what one job runs (``JobSpec``), what a runner saw (``RunOutcome``), the
protocol every runner adapter implements (``Runner``) and the streaming glue they share
(``LogSink``). (``runners.ProcessResult`` is what a plain ``forgepatch probe`` run saw, not a
verdict.)

smoke/ is policy + adapters. Policy: the plan (``matrix``), admission of an image to a job
(``admission``), the verdict (``verdict.judge``), the result cache (``result_cache``), flag
bisection (``bisect``), reports (``report``, ``merge``). Adapters: ``docker_runner`` (a job in a
container of its image) and ``local_runner`` (a process on this host, over the patched tree of
``local_tree``); a new runner (a cluster scheduler) is one more adapter file with this protocol.

A runner runs ``spec.command`` (in an image, or on this host), streams its output line by line
into the per-job log file and a ``Monitor``, enforces the hard timeout, honours ``cancel`` and
leaves nothing behind. ``verdict.judge`` turns the outcome into pass / fail / timeout / skipped.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from forgepatch.combination.records import AuditSummary
from forgepatch.inimage.monitor import Event, Monitor, Triage


@dataclass
class JobSpec:
    id: str
    arch: str
    pin: str
    profile: str
    kind: str  # server | probe | command
    command: list[str]
    image: str | None = None
    flags: list[str] = field(default_factory=list)
    gpus: int = 0
    network: bool = False
    timeout_s: float = 1800.0
    env: dict[str, str] = field(default_factory=dict)
    markers: dict[str, str] = field(default_factory=dict)
    required: bool = True
    index: int | None = None  # position in the unsharded plan
    patchset: str | None = None  # the patchset the image must carry (checked before it runs; None: not checked)
    audit: AuditSummary | None = None  # the build record's kernel audit of the image (evidence, copied into the result)
    # the other packages the image must carry (name -> combination.PackageIdentity; None: not checked)
    packages: dict | None = None


@dataclass
class RunOutcome:
    exit_code: int | None
    timed_out: bool
    interrupted: bool
    log_path: str
    triage: Triage
    stdout: str = ""  # the job's stdout alone where the runner can separate it, else all output
    duration_s: float = 0.0
    gpu_ids: list[int] = field(default_factory=list)
    error: str | None = None  # the runner itself failed (engine error, ...)
    image_id: str | None = None  # the exact image the job ran in (docker runner)
    image_digest: str | None = None  # its registry digest, when it has one
    image_labels: dict[str, str] = field(default_factory=dict)  # that image's labels


class Runner(Protocol):
    name: str

    def available_gpus(self) -> list[int]: ...

    def preflight(self, jobs: list[JobSpec]) -> None: ...

    def run(self, spec: JobSpec, gpu_ids: list[int], log_path: Path, cancel: threading.Event,
            on_event: Callable[[Event], None] | None = None) -> RunOutcome: ...


class LogSink:
    """Per-job log file + monitor, fed line by line (from one thread)."""

    def __init__(self, spec: JobSpec, log_path: Path, on_event: Callable[[Event], None] | None = None):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.path = log_path
        self.fh = open(log_path, "w", encoding="utf-8", buffering=1)
        self.monitor = Monitor(spec.markers or None, log_path=str(log_path), on_event=on_event)
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            self.fh.write(text + "\n")
            self.monitor.feed(text)

    def close(self, exit_code: int | None, timed_out: bool, timeout_s: float) -> Triage:
        if timed_out:
            self.line(f"[forgepatch] timeout after {timeout_s:g} s: job stopped")
        self.line(f"[forgepatch] exit code={exit_code}")
        self.fh.close()
        return self.monitor.finish(exit_code, timed_out)
