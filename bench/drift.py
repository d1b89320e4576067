"""Benchmark: `forgepatch drift --arch sm120` over 10 revisions of a real git repository
(one commit per SGLang release 0.5.14 .. 0.5.23, sources from the PyPI wheels), in one run:

- cold:  `forgepatch drift` CLI, empty drift cache (wall, including start-up)
- warm:  the same command again (per-tree memo answers every revision)
- warm, blob memo only: in-process scan with the per-tree memo off (every revision runs
  the engine; every file is answered from the per-blob memo)
- baseline: check out each revision into a worktree and run the engine on the directory
  (no memo), the way a script would without `drift`

and projects 200 nightlies from the measured per-distinct-blob cost.

    python bench/drift.py [--first 14] [--last 23] [--nightlies-per-release 14]

Prints JSON. Goals (issue 3): cold <= 5 s, warm <= 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

MATRIX = """default_pin = "v0.5.23"
[pins."v0.5.23"]
pypi = "0.5.23"
[arches.sm120]
patches = ["sm120-flashinfer-allreduce-fusion"]
"""


def cli(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    code = "import sys; from forgepatch.cli import main; sys.exit(main())"
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT / "src")})
    return time.perf_counter() - t, proc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--first", type=int, default=14, help="first release 0.5.N")
    ap.add_argument("--last", type=int, default=23, help="last release 0.5.N")
    ap.add_argument("--nightlies-per-release", type=int, default=14,
                    help="nightlies between two releases, to estimate files changed per nightly")
    ap.add_argument("--project", type=int, default=200, help="nightlies to project")
    opts = ap.parse_args()

    from forgepatch.arch import get_arch
    from forgepatch.fork.blobcache import BlobCache
    from forgepatch.config import load_matrix
    from forgepatch.fork.drift import scan
    from forgepatch.infra.gitrepo import GitRepo
    from forgepatch.paths import SHIPPED_PATCHES, cache_dir
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.patchset import load_patches
    from forgepatch.patching.trees import DirTree
    from support.nightlies import build_nightlies_repo

    releases = [f"0.5.{n}" for n in range(opts.first, opts.last + 1)]
    tags = [f"v{v}" for v in releases]
    wheels = cache_dir("wheels")  # resolved before FORGEPATCH_CACHE_DIR is redirected
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        repo = build_nightlies_repo(tmp / "sglang", releases)
        build_s = time.perf_counter() - t
        config = tmp / "matrix.toml"
        config.write_text(MATRIX)
        cache_root = tmp / "cache"
        cache_root.mkdir()
        (cache_root / "wheels").symlink_to(wheels, target_is_directory=True)
        env = {"FORGEPATCH_CACHE_DIR": str(cache_root)}
        args = ["--config", str(config), "--patches", str(SHIPPED_PATCHES), "drift", "--arch", "sm120",
                "--repo", str(repo), "--revs", ",".join(tags), "--json"]

        cold_s, cold = cli(args, env)
        assert cold.returncode in (0, 1), cold.stderr
        warm_runs = [cli(args, env) for _ in range(5)]
        warm_s = sorted(w for w, _ in warm_runs)[2]
        assert json.loads(warm_runs[0][1].stdout)["revs"] == json.loads(cold.stdout)["revs"]
        cold_doc = json.loads(cold.stdout)

        # in-process: cold (fresh memo) and warm with the per-blob memo only
        os.environ["FORGEPATCH_CACHE_DIR"] = str(cache_root)
        matrix = load_matrix(config)
        memo = tmp / "inproc.sqlite3"
        with BlobCache(memo) as cache:
            t = time.perf_counter()
            scan(repo, "sm120", matrix, SHIPPED_PATCHES, tags, cache=cache)
            inproc_cold_s = time.perf_counter() - t
            distinct_blobs = cache.misses - len(tags)  # minus one tree-memo miss per rev
        with BlobCache(memo) as cache:
            t = time.perf_counter()
            scan(repo, "sm120", matrix, SHIPPED_PATCHES, tags, cache=cache, tree_memo=False)
            blob_warm_s = time.perf_counter() - t

        # baseline: check out each revision, run the engine on the directory
        arch, patches = get_arch("sm120"), load_patches(SHIPPED_PATCHES, ["sm120-flashinfer-allreduce-fusion"])
        wt = tmp / "checkout"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(wt), tags[0]], check=True)
        t = time.perf_counter()
        base_status = []
        with GitRepo(repo) as r:
            for tag in tags:
                subprocess.run(["git", "-C", str(wt), "checkout", "-q", "-f", tag], check=True)
                version = r.tree(r.resolve(tag)).version()
                res = run_patches(DirTree(wt / "python" / "sglang", pristine=True), patches, arch, version)
                base_status.append([p.status.value for p in res.patches])
            baseline_s = time.perf_counter() - t
            files_per_rev = [len(r.tree(r.resolve(tag)).paths()) for tag in tags]
            changed = []
            for a, b in zip(tags, tags[1:]):
                out = subprocess.run(["git", "-C", str(repo), "diff", "--name-only", a, b, "--", "*.py"],
                                     capture_output=True, text=True, check=True).stdout
                changed.append(len(out.split()))
        assert base_status == [[p["status"] for p in rev["patches"]] for rev in cold_doc["revs"]]

    per_blob_s = inproc_cold_s / distinct_blobs
    per_rev_warm_s = blob_warm_s / len(tags)
    per_nightly_changed = sum(changed) / len(changed) / opts.nightlies_per_release
    projected_blobs = files_per_rev[-1] + opts.project * per_nightly_changed
    projected_cold_s = projected_blobs * per_blob_s + opts.project * per_rev_warm_s
    print(json.dumps({
        "revs": len(tags),
        "releases": f"{releases[0]}..{releases[-1]}",
        "repo_build_s": round(build_s, 2),
        "py_files_per_rev": files_per_rev,
        "distinct_py_blobs": distinct_blobs,
        "cli_cold_s": round(cold_s, 2),
        "cli_warm_s_median": round(warm_s, 3),
        "inprocess_cold_s": round(inproc_cold_s, 2),
        "inprocess_warm_blob_memo_only_s": round(blob_warm_s, 2),
        "baseline_checkout_and_apply_s": round(baseline_s, 2),
        "speedup_cold_vs_baseline": round(baseline_s / cold_s, 2),
        "speedup_warm_vs_baseline": round(baseline_s / warm_s, 1),
        "per_distinct_blob_ms": round(per_blob_s * 1000, 3),
        "per_rev_warm_ms": round(per_rev_warm_s * 1000, 1),
        "projection": {
            "nightlies": opts.project,
            "assumed_nightlies_per_release": opts.nightlies_per_release,
            "changed_py_files_per_release_avg": round(sum(changed) / len(changed), 1),
            "distinct_blobs_est": round(projected_blobs),
            "cold_s_est": round(projected_cold_s, 1),
            "baseline_s_est": round(baseline_s / len(tags) * opts.project, 1),
        },
        "goals": {"cold_le_5s": cold_s <= 5.0, "warm_le_1s": warm_s <= 1.0},
    }, indent=2))


if __name__ == "__main__":
    main()
