"""Speed and memory of ``forgepatch triage`` on real logs (issue 24; goal: a 20k-line log well
under 1 s on a quiet machine, a 1 GB log in bounded memory).

Measured side by side, same run:
  triage     ``triage_lines`` over each noisy fixture log (>= 20k lines, tests/fixtures/logs/)
  baseline   the seed's grep: ``re.search("Traceback|Exception|RuntimeError")`` over the same lines
  stream     ``forgepatch triage FILE`` in a child process over a log of --mb MiB made of the
             noisy log's lines (a segfault line at the end); wall time and peak RSS

    PYTHONPATH=src python bench/triage.py [--rounds 3] [--mb 1024]
"""

from __future__ import annotations

import argparse
import gzip
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "fixtures" / "logs"
NOISY = ["noisy-serving-watchdog.log.gz", "noisy-serving-illegal-address.log.gz"]
CHILD = r"""
import resource, sys, time
from forgepatch.smoke import service
t0 = time.perf_counter()
t = service.triage(sys.argv[1])
print(f"{time.perf_counter() - t0:.2f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss} {t.lines} {t.signature}")
"""


def median_time(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mb", type=int, default=0, help="also stream a log of this many MiB (0: skip)")
    args = ap.parse_args()
    from forgepatch.inimage.monitor import triage_lines

    grep = re.compile(r"Traceback|Exception|RuntimeError")
    for name in NOISY:
        lines = gzip.decompress((LOGS / name).read_bytes()).decode().splitlines()
        ours = median_time(lambda: triage_lines(lines), args.rounds)
        base = median_time(lambda: [ln for ln in lines if grep.search(ln)], args.rounds)
        print(f"{name}: {len(lines)} lines  triage {ours:.3f} s  grep baseline {base:.3f} s  "
              f"ratio {ours / base:.1f}x")
    if args.mb:
        block = gzip.decompress((LOGS / NOISY[0]).read_bytes()).decode().splitlines()[:21000]
        chunk = ("\n".join(block[8:21000]) + "\n").encode()
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "big.log"
            with log.open("wb") as f:
                f.write(("\n".join(block[:8]) + "\n").encode())
                while f.tell() < args.mb << 20:
                    f.write(chunk)
                f.write(b"bash: line 1:  77 Segmentation fault      python3 serve.py\n")
            size = log.stat().st_size
            out = subprocess.run([sys.executable, "-c", CHILD, str(log)], capture_output=True, text=True,
                                 env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}, check=False)
            wall, rss_kb, nlines, sig = out.stdout.split()
            print(f"stream {size / 2**20:.0f} MiB ({nlines} lines): {wall} s, peak RSS {int(rss_kb) / 1024:.0f} MiB, "
                  f"signature {sig}")


if __name__ == "__main__":
    main()
