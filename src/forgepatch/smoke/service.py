"""What ``forgepatch smoke`` / ``triage`` / ``matrix`` do, minus the rendering."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Callable

from forgepatch.combination.results import JobResult, Plan, SmokeResults
from forgepatch.errors import BadInput
from forgepatch.smoke.builds import use_builds
from forgepatch.smoke.local_runner import LocalRunner
from forgepatch.smoke.matrix import default_job_id, job_spec, parse_shard, plan as plan_jobs, run_jobs, select
from forgepatch import utctime
from forgepatch.infra.refs import is_digest_ref
from forgepatch.inimage.monitor import triage_lines
from forgepatch.patching.series import expected_packages, load_series
from forgepatch.paths import cache_dir
from forgepatch.smoke.bisect import bisect_profile, subset_id
from forgepatch.smoke.docker_runner import DockerRunner
from forgepatch.smoke.result_cache import ResultCache, cache_key


def make_runner(name: str, matrix=None, patches=None):
    """The runner; the local one gets the matrix and patch library, to run SGLang jobs on the
    pin's patched tree (``smoke.local_tree``)."""
    if name == "docker":
        return DockerRunner()
    if name == "local":
        return LocalRunner(matrix=matrix, patches=patches)
    raise BadInput(f"--runner: {name!r} is not docker or local")


def logs_root(logs: Path | None) -> Path:
    root = Path(logs) if logs else cache_dir("smoke", "logs")
    run = root / utctime.compact()
    run.mkdir(parents=True, exist_ok=True)
    return run


def plan(matrix, arch=None, pin=None, profile=None, shard=None, image=None):
    return [job_spec(matrix, a, p, prof, image, index=i)
            for i, (a, p, prof) in plan_jobs(matrix, arch, pin, profile, parse_shard(shard))]


def smoke(matrix, runner_name: str, arch=None, pin=None, profile=None, shard=None, image=None,
          parallel=None, logs: Path | None = None, on_result: Callable[[JobResult], None] | None = None,
          cache: bool = True, patches=None, builds: list[Path] | None = None,
          on_pull: Callable[[str, dict], None] | None = None) -> tuple[SmokeResults, Path]:
    """Run the selected jobs; the results document (``combination.results``) and the logs.

    ``builds`` (build records, ``combination.records``) give each job the digest built for its
    arch x pin and the build's audit; jobs on a digest also check the image's patchset against
    the patch files (``patches``) before anything is pulled."""
    if builds and image:
        raise BadInput("--builds and --image are exclusive (the build record names each job's image)")
    if builds and runner_name != "docker":
        raise BadInput("--builds needs --runner docker (the record names images)")
    specs = plan(matrix, arch, pin, profile, shard, image)
    whole = Plan.of([default_job_id(*c) for c in select(matrix, arch, pin, profile)])
    if not specs:
        if shard:
            return SmokeResults.of([], plan=whole, shard=shard), Path(".")
        raise BadInput("no smoke jobs match (check --arch/--pin/--profile and arches.<a>.profiles)")
    if builds:
        use_builds(specs, builds)
    if patches is not None and runner_name == "docker":
        expected_patchsets(matrix, patches, [s for s in specs if s.image and is_digest_ref(s.image)])
    runner = make_runner(runner_name, matrix, patches)
    if on_pull is not None and hasattr(runner, "on_pull"):
        runner.on_pull = on_pull
    run_dir = logs_root(logs)
    results = run_jobs(specs, runner, run_dir, parallel, on_result)
    if cache:
        rc = result_cache()
        for spec, res in zip(specs, results):
            if res.status not in ("error", "interrupted"):
                rc.put(cache_key(spec, runner.name, fingerprint(runner, spec)), res)
    return SmokeResults.of(results, plan=whole, shard=shard, logs=str(run_dir)), run_dir


def expected_patchsets(matrix, patches, specs) -> None:
    """The patchset each job's arch has now, and each other package at the pin's release
    (what its image must carry)."""
    memo: dict[str, object] = {}
    for spec in specs:
        if spec.arch not in memo:
            memo[spec.arch] = load_series(matrix, spec.arch, patches)
        series = memo[spec.arch]
        spec.patchset = series.hash
        spec.packages = expected_packages(matrix, series, spec.pin) or None  # every other package it patches


def result_cache():
    return ResultCache(cache_dir("smoke", "results"))


def fingerprint(runner, spec) -> str:
    """The image's ID for the docker runner (a rebuilt image invalidates cached results)."""
    client = getattr(runner, "client", None)
    if client is not None and spec.image:
        try:
            return client.images.get(spec.image).id
        except Exception:
            return ""
    return ""


def bisect(matrix, runner_name: str, profile: str, arch=None, pin=None, image=None, logs: Path | None = None,
           cache: bool = True, patches=None):
    prof = matrix.profile(profile)
    if matrix.profile_kind(profile) != "server":
        raise BadInput(f"--bisect: profile {profile!r} has no SGLang flags to bisect (kind {matrix.profile_kind(profile)!r})")
    if not prof.flags:
        raise BadInput(f"--bisect: profile {profile!r} has no flag groups")
    combos = select(matrix, arch, pin, profile)
    pairs = sorted({(a, p) for a, p, _ in combos})
    if arch and pin:
        pairs = [(arch, pin)]
    if not pairs:
        if not arch:
            raise BadInput(f"--bisect: profile {profile!r} runs on no arch; give --arch")
        pairs = [(arch, matrix.pin(pin)[0])]
    if len(pairs) > 1:
        raise BadInput(f"--bisect: profile {profile!r} runs on {len(pairs)} arch/pin pairs; pick one with --arch/--pin")
    (a, p), = pairs
    runner = make_runner(runner_name, matrix, patches)
    run_dir = logs_root(logs)
    rc = result_cache() if cache else None
    base = job_spec(matrix, a, p, profile, image)

    def spec_for(subset):
        return job_spec(matrix, a, p, profile, image, flags=subset,
                        job_id=base.id if subset == prof.flags else subset_id(base.id, subset))

    def launch(subset):
        return run_jobs([spec_for(subset)], runner, run_dir)[0]

    def key(subset):
        spec = spec_for(subset)
        return cache_key(spec, runner.name, fingerprint(runner, spec))

    return bisect_profile(list(prof.flags), launch, key, rc, profile, a, p), run_dir


def github_matrix(matrix, shard=None, by: str = "job") -> dict:
    """A GitHub Actions ``strategy.matrix`` document: ``{"include": [...]}``."""
    combos = select(matrix, shard=parse_shard(shard))
    if by == "image":
        seen, include = set(), []
        for a, p, _ in combos:
            if (a, p) not in seen:
                seen.add((a, p))
                include.append({"arch": a, "pin": p, "source": matrix.pins[p].source,
                                "base_image": matrix.arches[a].base_image or ""})
        return {"include": include}
    if by != "job":
        raise BadInput(f"--by: {by!r} is not job or image")
    include = []
    for a, p, prof in combos:
        cfg = matrix.profiles[prof]
        include.append({"name": f"{a}-{p}-{prof}", "arch": a, "pin": p, "profile": prof, "gpus": cfg.gpus,
                        "required": cfg.required, "source": matrix.pins[p].source})
    return {"include": include}


_MAX_LINE_CHARS = 1 << 20  # a longer line is cut: triage streams a log of any size in bounded memory


def _stream_lines(f, seen: list[bool]):
    """``f``'s lines, each at most ``_MAX_LINE_CHARS`` (the rest of a longer one is skipped);
    ``seen[0]`` turns True at the first non-blank line."""
    while line := f.readline(_MAX_LINE_CHARS):
        if not line.endswith("\n"):
            while (rest := f.readline(_MAX_LINE_CHARS)) and not rest.endswith("\n"):
                pass
        if not seen[0] and line.strip():
            seen[0] = True
        yield line


def triage(path: str, markers: dict | None = None, context: int = 3):
    """Triage a log file (or ``-``: stdin), streamed line by line."""
    import sys

    where = "stdin" if path == "-" else path
    seen = [False]
    try:
        f = sys.stdin if path == "-" else open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError as exc:
        raise BadInput(f"{path}: cannot read log: {exc.strerror}") from None
    try:
        t = triage_lines(_stream_lines(f, seen), markers, log_path=None if path == "-" else path, context=context)
    except ValueError as exc:
        raise BadInput(f"markers: {exc}") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read log: {exc.strerror}") from None
    finally:
        if f is not sys.stdin:
            f.close()
    if not seen[0]:  # nothing to judge: not a clean run either
        raise BadInput(f"{where}: empty log, nothing to triage")
    return replace(t, log_path=t.log_path or "-")


def dumps(doc) -> str:
    return json.dumps(doc, indent=2, default=str)
