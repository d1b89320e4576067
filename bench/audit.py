"""Benchmark: `forgepatch audit --dir` on a directory of shared objects, against the baseline
of reading every shared object whole (what any tool that hashes, copies or decompresses the
files pays), run side by side:

- audit:    ``audit_dir`` (fatbin headers only), in-process, ``--rounds`` times;
- baseline: open every file the audit considers and read all its bytes, ``--rounds`` times.

The first round of each is reported separately (cold file cache when the directory was not
read before; run the baseline first with ``--baseline-first`` to warm it for the audit).
Reports seconds, GiB of shared objects, seconds per GiB and the ratio audit/baseline.

    python bench/audit.py --dir /path/to/site-packages [--arch sm90] [--rounds 3]
    python bench/audit.py --image IMAGE [--arch sm120] [--rounds 3]   # through the engine

Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]


def read_whole(files: list[Path]) -> int:
    total = 0
    for path in files:
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 22):
                total += len(chunk)
    return total


def timed(fn, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def summary(times: list[float], gib: float) -> dict:
    warm = times[1:] or times
    med = statistics.median(warm)
    return {"first_s": round(times[0], 3), "median_warm_s": round(med, 3), "all_s": [round(t, 3) for t in times],
            "s_per_gib_warm": round(med / gib, 4) if gib else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--image")
    ap.add_argument("--arch", default="sm90")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline-first", action="store_true")
    opts = ap.parse_args()

    from forgepatch.arch import get_arch
    from forgepatch.images.audit import shared_objects, audit_dir, audit_image

    arch = get_arch(opts.arch)
    doc: dict = {"arch": arch.name}
    if opts.dir:
        files = [p for p, _ in shared_objects(opts.dir)]
        nbytes = sum(p.stat().st_size for p in files)
        gib = nbytes / (1 << 30)
        reports = []

        def audit():
            reports.append(audit_dir(opts.dir, arch))

        order = [("baseline", lambda: read_whole(files)), ("audit", audit)]
        if not opts.baseline_first:
            order.reverse()
        results = {name: summary(timed(fn, opts.rounds), gib) for name, fn in order}
        stats = reports[-1].stats
        doc.update({"dir": str(opts.dir), "files": len(files), "gib": round(gib, 3),
                    "cuda_libraries": stats["cuda_libraries"], "bytes_read_by_audit": stats["bytes_read"],
                    "fraction_read": round(stats["bytes_read"] / nbytes, 6) if nbytes else None,
                    **results,
                    "ratio_audit_over_baseline_warm": round(results["audit"]["median_warm_s"]
                                                            / max(results["baseline"]["median_warm_s"], 1e-9), 4)})
    if opts.image:
        reports = []
        times = timed(lambda: reports.append(audit_image(opts.image, arch)), opts.rounds)
        stats = reports[-1].stats
        gib = stats["bytes_total"] / (1 << 30)
        doc["image"] = {"image": opts.image, "shared_objects": stats["shared_objects"], "gib": round(gib, 3),
                        "streamed_gib": round(stats["bytes_streamed"] / (1 << 30), 3), **summary(times, gib)}
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
