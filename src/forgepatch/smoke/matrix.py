"""The smoke matrix: arch x pin x profile jobs from matrix.toml, and running them in parallel
across GPU slots.

Job set: ``Matrix.combos()`` (the one place include/exclude rules are read; release asks it
too). ``--arch/--pin/--profile`` then filter, and ``--shard I/N`` keeps every N-th job; each job
keeps its index in the unsharded plan, so shards merge back into the unsharded order.
"""

from __future__ import annotations

import json
import shlex
import threading
from pathlib import Path
from typing import Callable

from forgepatch.combination import smoke_image
from forgepatch.combination.results import JobResult
from forgepatch.errors import BadInput
from forgepatch.inimage.signatures import with_overrides
from forgepatch.smoke.gpus import check_gpus
from forgepatch.smoke.jobs import JobSpec, Runner
from forgepatch.smoke.verdict import judge

PROBE_COMMAND = ["python3", "-m", "forgepatch.inimage.probe", "--json"]
SERVER_COMMAND = ["python3", "-m", "forgepatch.inimage.server"]


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise BadInput(f"--shard: {text!r} is not I/N (e.g. 2/4)") from None
    if not (n >= 1 and 1 <= i <= n):
        raise BadInput(f"--shard: {text!r} needs 1 <= I <= N")
    return i, n


def select(matrix, arch: str | None = None, pin: str | None = None, profile: str | None = None,
           shard: tuple[int, int] | None = None) -> list[tuple[str, str, str]]:
    """Filtered combos (``Matrix.combos``), then shard I of N; BadInput for unknown names."""
    return [c for _, c in plan(matrix, arch, pin, profile, shard)]


def plan(matrix, arch: str | None = None, pin: str | None = None, profile: str | None = None,
         shard: tuple[int, int] | None = None) -> list[tuple[int, tuple[str, str, str]]]:
    """(index in the unsharded plan, combo) for the selected jobs of shard I of N."""
    if arch is not None:
        matrix.arch(arch)
    if pin is not None:
        matrix.pin(pin)
    if profile is not None:
        matrix.profile(profile)
    chosen = [c for c in matrix.combos() if (arch in (None, c[0])) and (pin in (None, c[1])) and (profile in (None, c[2]))]
    indexed = list(enumerate(chosen))
    if shard:
        i, n = shard
        indexed = indexed[i - 1 :: n]
    return indexed


def default_job_id(arch: str, pin: str, profile: str) -> str:
    return f"{arch}-{pin}-{profile}"


def image_for(matrix, arch: str, pin: str, image: str | None = None) -> str:
    return smoke_image(image or matrix.smoke.image, matrix.smoke.image_repo, pin, arch)


def job_spec(matrix, arch: str, pin: str, profile: str, image: str | None = None,
             flags: list[str] | None = None, job_id: str | None = None, index: int | None = None) -> JobSpec:
    """The job for one combination (``flags`` overrides the profile's, for bisection)."""
    prof = matrix.profile(profile)
    kind = matrix.profile_kind(profile)
    _, pin_cfg = matrix.pin(pin)
    flags = list(prof.flags if flags is None else flags)
    if kind == "probe":
        command = [*PROBE_COMMAND, "--arch", arch] + (["--gpus", str(prof.gpus)] if prof.gpus > 1 else [])
    elif kind == "command":
        command = shlex.split(prof.command)
    else:
        if not matrix.smoke.model:
            raise BadInput(f"profile {profile!r} runs an SGLang server but [smoke] model is not set")
        command = [*SERVER_COMMAND, "--model-path", matrix.smoke.model,
                   "--launch", matrix.smoke.server_command, "--timeout", f"{prof.timeout_s - min(30.0, max(1.0, prof.timeout_s / 10)):g}"]
        if pin_cfg.markers:
            command += ["--markers", json.dumps(pin_cfg.markers)]
        command += ["--", *flags]
    return JobSpec(
        id=job_id or default_job_id(arch, pin, profile), arch=arch, pin=pin, profile=profile, kind=kind, command=command,
        image=image_for(matrix, arch, pin, image), flags=flags, gpus=prof.gpus, network=prof.network,
        timeout_s=float(prof.timeout_s), env=dict(prof.env), markers=dict(pin_cfg.markers), required=prof.required,
        index=index,
    )


def validate_markers(specs: list[JobSpec]) -> None:
    for spec in specs:
        try:
            with_overrides(spec.markers)
        except ValueError as exc:
            raise BadInput(f"pins.{spec.pin}.markers: {exc}") from None


def run_jobs(specs: list[JobSpec], runner: Runner, logs_dir: Path, parallel: int | None = None,
             on_result: Callable[[JobResult], None] | None = None, gpus: list[int] | None = None) -> list[JobResult]:
    """Run ``specs`` in parallel, each on its own GPU subset; results in ``specs`` order.

    At most ``parallel`` jobs at once (default: one per GPU, at least one); a job waits until
    enough GPU slots are free. On Ctrl-C every running job is cancelled (its container or
    process tree is stopped and removed) before KeyboardInterrupt propagates.
    """
    slots = runner.available_gpus() if gpus is None else list(gpus)
    check_gpus(specs, slots, f"runner {runner.name!r}")
    validate_markers(specs)
    runner.preflight(specs)
    parallel = max(1, parallel or len(slots) or 1)
    free = list(slots)
    cond = threading.Condition()
    cancel = threading.Event()
    results: dict[str, JobResult] = {}
    pending = list(specs)
    running: dict[str, threading.Thread] = {}
    report_lock = threading.Lock()  # one job's line at a time

    def work(spec: JobSpec, ids: list[int]) -> None:
        try:
            out = runner.run(spec, ids, logs_dir / f"{spec.id}.log", cancel)
            res = judge(spec, out, runner.name)
        except Exception as exc:  # a runner bug must not hang the scheduler
            res = JobResult(id=spec.id, arch=spec.arch, pin=spec.pin, profile=spec.profile, kind=spec.kind,
                            status="error", summary=f"runner error: {exc}", index=spec.index, flags=spec.flags,
                            image=spec.image, runner=runner.name)
        try:
            if on_result:  # before the scheduler can see the job done: its line precedes the report
                with report_lock:
                    on_result(res)
        finally:
            with cond:
                results[spec.id] = res
                free.extend(ids)
                running.pop(spec.id, None)
                cond.notify_all()

    try:
        with cond:
            while pending or running:
                for spec in list(pending):
                    if len(running) >= parallel:
                        break
                    if spec.gpus <= len(free):
                        ids = sorted(free)[: spec.gpus]
                        for i in ids:
                            free.remove(i)
                        pending.remove(spec)
                        t = threading.Thread(target=work, args=(spec, ids), name=f"smoke-{spec.id}", daemon=True)
                        running[spec.id] = t
                        t.start()
                cond.wait(0.2)
    except KeyboardInterrupt:
        cancel.set()
        for t in list(running.values()):
            t.join(timeout=60)
        raise
    return [results[s.id] for s in specs]
