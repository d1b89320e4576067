"""Detection latency of the smoke monitor: time from a line being written by the job to the
monitor reporting its phase / signature event (goal <= 1 s).

Paths measured, each over the real plumbing:
  pipe-baseline  a subprocess's stdout read line by line, no monitor (the floor)
  local          LocalRunner: session, pump thread, log file, Monitor
  docker         DockerRunner: container log stream (json-file driver), log file, Monitor

The job prints ``<wall-clock time> <SGLang marker or error line>`` every 50 ms; latency is the
wall-clock time at the event minus the stamp (the container shares the host clock).

    PYTHONPATH=src python bench/monitor_latency.py [--lines 100] [--image forgepatch-test/base:bookworm]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

WRITER = r"""
import sys, time
lines = ["[t TP0] Load weight begin.", "[t TP0] Capture cuda graph begin.",
         "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmStridedBatchedEx`",
         "[t TP0] KV Cache is allocated."]
for i in range(int(sys.argv[1])):
    time.sleep(0.05)
    print(f"{time.time():.6f} {lines[i % len(lines)]}", flush=True)
"""


def stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"n": len(xs), "median_ms": 1000 * statistics.median(xs), "p95_ms": 1000 * xs[int(0.95 * (len(xs) - 1))],
            "max_ms": 1000 * xs[-1]}


def baseline(n: int) -> list[float]:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(n)], stdout=subprocess.PIPE)
    out = []
    for raw in iter(proc.stdout.readline, b""):
        out.append(time.time() - float(raw.split()[0]))
    proc.wait()
    return out


def via_runner(runner, n: int, image: str | None, command: list[str]) -> list[float]:
    from forgepatch.smoke.jobs import JobSpec

    lat: list[float] = []
    seen: set[str] = set()

    def on_event(ev) -> None:  # the first event of each line
        stamp = ev.line.split(" ", 1)[0]
        if stamp in seen:
            return
        seen.add(stamp)
        try:
            lat.append(time.time() - float(stamp))
        except ValueError:
            pass

    spec = JobSpec("bench", "sm90", "p", "bench", "command", command, image, timeout_s=120)
    with tempfile.TemporaryDirectory() as tmp:
        out = runner.run(spec, [], Path(tmp) / "bench.log", threading.Event(), on_event)
    assert out.exit_code == 0, out.triage
    return lat


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=100)
    ap.add_argument("--image", default="forgepatch-test/base:bookworm")
    args = ap.parse_args()
    from forgepatch.smoke.local_runner import LocalRunner

    rows = {"pipe-baseline": stats(baseline(args.lines)),
            "local": stats(via_runner(LocalRunner(), args.lines, None, [sys.executable, "-c", WRITER, str(args.lines)]))}
    try:
        from forgepatch.smoke.docker_runner import DockerRunner

        rows["docker"] = stats(via_runner(DockerRunner(), args.lines, args.image, ["python3", "-c", WRITER, str(args.lines)]))
    except Exception as exc:  # no engine / image here
        print(f"docker: skipped ({exc})", file=sys.stderr)
    base = rows["pipe-baseline"]["median_ms"] or 1e-3
    print(f"{'path':<14} {'n':>4} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} {'x baseline':>11}")
    for name, r in rows.items():
        print(f"{name:<14} {r['n']:>4} {r['median_ms']:>10.2f} {r['p95_ms']:>8.2f} {r['max_ms']:>8.2f} {r['median_ms'] / base:>11.1f}")
    worst = max(r["max_ms"] for r in rows.values())
    print(f"goal <= 1000 ms: {'met' if worst <= 1000 else 'MISSED'} (worst {worst:.1f} ms)")
    return 0 if worst <= 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
