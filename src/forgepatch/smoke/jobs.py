"""Smoke jobs: what one job runs (``JobSpec``), what a runner saw (``RunOutcome``) and the
verdict (``combination.results.JobResult``, the results schema), plus the streaming glue every
runner shares and the local runner. (``runners.ProcessResult`` is what a plain ``forgepatch
probe`` run saw, not a verdict.)

A runner runs ``spec.command`` (in an image, or on this host), streams its output line by line
into the per-job log file and a ``Monitor``, enforces the hard timeout, honours ``cancel`` and
leaves nothing behind. ``judge`` turns the outcome into pass / fail / timeout / skipped.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from forgepatch.combination import LABEL
from forgepatch.combination.records import AuditSummary
from forgepatch.combination.results import JobResult, Toolchain
from forgepatch.inimage.monitor import Event, Monitor, Triage, extract_json, with_probe_verdict
from forgepatch.inimage.process import follow_session, start_session
from forgepatch.inimage.toolchain import prelude
from forgepatch.paths import PACKAGE_DIR
from forgepatch import utctime



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


def judge(spec: JobSpec, out: RunOutcome, runner: str = "") -> JobResult:
    """Pass / fail / timeout / skipped for one job, with the monitor's findings attached."""
    doc = extract_json(out.stdout) if spec.kind == "probe" else None
    t = with_probe_verdict(out.triage, doc)
    found = (doc or {}).get("toolchain") or t.toolchain
    imported = (doc or {}).get("imported") or t.imported
    labels = out.image_labels
    res = JobResult(
        id=spec.id, arch=spec.arch, pin=spec.pin, profile=spec.profile, kind=spec.kind, status="fail",
        summary="", index=spec.index, flags=list(spec.flags), image=spec.image, runner=runner, signature=t.signature,
        label=t.label, last_phase=t.last_phase, failing_phase=t.failing_phase, error_line=t.error_line,
        error_lineno=t.error_lineno, exit_code=out.exit_code, timed_out=out.timed_out, log_path=out.log_path,
        duration_s=round(out.duration_s, 3), gpu_ids=list(out.gpu_ids), required=spec.required,
        context=[{"lineno": n, "line": s} for n, s in t.context], notes=list(t.notes),
        image_id=out.image_id, image_digest=out.image_digest, patchset=labels.get(LABEL["patchset"]), audit=spec.audit,
        upstream=labels.get(LABEL["upstream"]), engine=labels.get(LABEL["engine"]),
        packages=labels.get(LABEL["packages"]),
        toolchain=Toolchain.model_validate(found) if isinstance(found, dict) else None,
        imported=imported if isinstance(imported, dict) else None,
        finished_at=utctime.iso(),
    )
    seen = {p[0] for p in t.phases}
    if out.error:
        res.status, res.summary = "error", out.error
        return res
    if out.interrupted:
        res.status, res.summary = "interrupted", "interrupted"
        return res
    if spec.kind == "probe":
        res.probe = doc
        res.verdict = (doc or {}).get("verdict")
        if res.verdict == "pass" and out.exit_code == 0:
            res.status = "pass"
        elif res.verdict in ("no-gpu",) and not out.timed_out:
            res.status, res.summary = "skipped", "probe: no GPU visible"
    elif spec.kind == "server":
        if out.exit_code == 0 and not out.timed_out and "answered" in seen:
            res.status = "pass"
    elif out.exit_code == 0 and not out.timed_out:
        res.status = "pass"
    if (out.timed_out or t.signature == "timeout") and res.status != "pass":
        res.status = "timeout"
    if res.status == "pass":
        res.summary = "pass"
        res.signature = res.label = res.failing_phase = res.error_line = res.error_lineno = None
        res.context = []
    elif not res.summary:
        if not res.label:
            res.signature, res.label = ("timeout", "timeout") if out.timed_out else ("exit", f"exit code {out.exit_code}")
        res.summary = res.label + (f" in {res.failing_phase}" if res.failing_phase else "")
        if res.status == "timeout" and res.signature != "timeout":
            res.summary += " (then timed out)"
    return res


class LocalRunner:
    """Run jobs as processes on this host, each in its own session (``process.start_session``,
    ``process.follow_session``: stdout and stderr merged, as in a container's log).

    With the matrix and patch library, a job that runs SGLang (or another package the series
    patches) runs the pin's packages patched for its arch (``smoke.local_tree``: first on
    PYTHONPATH, checked before any job starts)."""

    name = "local"

    def __init__(self, stop_grace_s: float = 10.0, matrix=None, patches=None):
        self.stop_grace_s = stop_grace_s
        self.matrix, self.patches = matrix, patches
        self.trees: dict[tuple[str, str], object] = {}
        self._checked: set = set()  # ((arch, pin), interpreter) whose `import sglang` was checked
        self._imports: dict[str, tuple[str, ...]] = {}  # arch -> import names of the packages its series patches

    def _runs_patched(self, spec: JobSpec) -> bool:
        from forgepatch.smoke import local_tree

        if spec.arch not in self._imports:
            self._imports[spec.arch] = local_tree.patched_imports(self.matrix, self.patches, spec.arch)
        return local_tree.runs_sglang(spec, self._imports[spec.arch])

    def available_gpus(self) -> list[int]:
        from forgepatch.smoke.gpus import host_gpus

        return host_gpus()

    def preflight(self, jobs: list[JobSpec]) -> None:
        """Build (or reuse) the patched tree of every (arch, pin) whose jobs run SGLang, and check
        that ``import sglang`` finds it; refuses before any job is launched."""
        from forgepatch.smoke import local_tree

        if self.matrix is None:
            return
        for spec in jobs:
            if not self._runs_patched(spec):
                continue
            key = (spec.arch, spec.pin)
            if key not in self.trees:
                self.trees[key] = local_tree.prepare(self.matrix, self.patches, spec.arch, spec.pin)
            env = self._env(spec, [])  # the job's own environment and interpreter
            python = local_tree.job_python(spec, env)
            if (key, python) not in self._checked:
                local_tree.check_import(self.trees[key], env, python)
                self._checked.add((key, python))

    def _argv(self, spec: JobSpec) -> list[str]:
        argv = list(spec.command)
        if argv and argv[0] in ("python3", "python"):
            argv[0] = sys.executable
        return prelude(sys.executable, argv) if spec.kind == "command" else argv

    def _env(self, spec: JobSpec, gpu_ids: list[int]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(spec.env)
        src = str(PACKAGE_DIR.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        if gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpu_ids))
        from forgepatch.smoke.local_tree import env_with

        return env_with(self._tree(spec), env)

    def _tree(self, spec: JobSpec):
        """The patched tree a job runs on: its (arch, pin)'s, for a job that runs a patched package."""
        if self.matrix is None:
            return None
        return self.trees.get((spec.arch, spec.pin)) if self._runs_patched(spec) else None

    def run(self, spec, gpu_ids, log_path, cancel, on_event=None) -> RunOutcome:
        sink = LogSink(spec, Path(log_path), on_event)
        tree = self._tree(spec)
        if tree is not None:
            sink.line(tree.log_line())
        elif self.matrix is not None:
            from forgepatch.smoke.local_tree import LOG_PREFIX

            sink.line(f"{LOG_PREFIX} this job's command does not run sglang; environment unchanged")
        stdout: list[str] = []
        try:
            proc = start_session(self._argv(spec), env=self._env(spec, gpu_ids), merge_stderr=True)
        except OSError as exc:
            triage = sink.close(None, False, spec.timeout_s)
            return RunOutcome(None, False, False, str(log_path), triage, "", 0.0, gpu_ids,
                              error=f"cannot start {spec.command[0]!r}: {exc.strerror}")

        def on_line(_stream: str, text: str) -> None:
            stdout.append(text)
            sink.line(text)

        # always sweeps the whole session: a stopped job, and a finished job's leftovers
        ended = follow_session(proc, on_line=on_line, timeout_s=spec.timeout_s, cancel=cancel,
                               stop_grace_s=self.stop_grace_s)
        triage = sink.close(ended.returncode, ended.timed_out, spec.timeout_s)
        return RunOutcome(ended.returncode, ended.timed_out, ended.interrupted, str(log_path), triage,
                          "\n".join(stdout) + "\n", ended.seconds, gpu_ids)
