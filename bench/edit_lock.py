"""Benchmark: what the edit-lock check costs a series run on the full newest-release tree.

Interleaved, same process: the shipped sm120 series through ``run_series`` (engine +
self-check + edit sets + lock check) against the engine alone (``run_patches``, the same
series, no lock check), and the lock check by itself (``editlock.review`` on a finished
result: edit sets of the changed files, reading the lock).

    python bench/edit_lock.py [--version 0.5.23] [--runs 5]

Prints medians and the ratio as JSON. Goal: the lock check costs <= 5% of a run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", default="0.5.23")
    ap.add_argument("--arch", default="sm120")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    from forgepatch.config import load_matrix
    from forgepatch.patching import astview, editlock, headers
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.series import load_series, run_series
    from forgepatch.patching.trees import DirTree
    from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES
    from forgepatch.sources import pypi_tree

    tree = pypi_tree(args.version)
    series = load_series(load_matrix(SHIPPED_MATRIX), args.arch, SHIPPED_PATCHES)

    def cold() -> None:
        astview.view.cache_clear()
        headers.defs_of.cache_clear()

    def with_lock() -> float:
        cold()
        t = time.perf_counter()
        res = run_series(series, DirTree(tree.package, True), args.version)
        assert not res.drift and all(p.edit_set for p in res.patches), res.to_json()
        return time.perf_counter() - t

    def without_lock() -> float:
        cold()
        t = time.perf_counter()
        run_patches(DirTree(tree.package, True), list(series.patches), series.arch, args.version)
        return time.perf_counter() - t

    res = run_patches(DirTree(tree.package, True), list(series.patches), series.arch, args.version)

    def review_only() -> float:
        t = time.perf_counter()
        editlock.review(res, list(series.patches))
        return time.perf_counter() - t

    with_lock()  # warm imports and the page cache
    locked, bare, alone = [], [], []
    for _ in range(args.runs):
        locked.append(with_lock())
        bare.append(without_lock())
        alone.append(review_only())
    doc = {
        "version": args.version,
        "arch": args.arch,
        "series_with_lock_check_s_median": round(statistics.median(locked), 3),
        "series_without_lock_check_s_median": round(statistics.median(bare), 3),
        "ratio": round(statistics.median(locked) / statistics.median(bare), 3),
        "lock_check_alone_ms_median": round(1000 * statistics.median(alone), 1),
        "runs": args.runs,
    }
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
