"""The local runner (an adapter of ``jobs.Runner``): jobs as processes on this host."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from forgepatch.inimage.process import follow_session, start_session
from forgepatch.inimage.toolchain import prelude
from forgepatch.paths import PACKAGE_DIR
from forgepatch.smoke import local_tree
from forgepatch.smoke.gpus import host_gpus
from forgepatch.smoke.jobs import JobSpec, LogSink, RunOutcome
from forgepatch.smoke.local_tree import LOG_PREFIX, env_with


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
        if spec.arch not in self._imports:
            self._imports[spec.arch] = local_tree.patched_imports(self.matrix, self.patches, spec.arch)
        return local_tree.runs_sglang(spec, self._imports[spec.arch])

    def available_gpus(self) -> list[int]:
        return host_gpus()

    def preflight(self, jobs: list[JobSpec]) -> None:
        """Build (or reuse) the patched tree of every (arch, pin) whose jobs run SGLang, and check
        that ``import sglang`` finds it; refuses before any job is launched."""
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
