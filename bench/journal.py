"""Benchmark: the cost of crash safety in ``apply --in-place`` (``forgepatch.infra.journal``), side by
side with plain writes of the same bytes, on the files the sm120 series changes in a real
release tree (0.5.23: 3 files).

- journal: lock the tree, stage the files (fsync each), write and commit the journal (fsync,
  rename, fsync the directory), rename the staged copies, fsync their directories, remove
  the journal, unlock: what ``apply --in-place`` does now.
- plain: one temp file per target then one rename each, no fsync, no journal, no lock: the
  writer before the journal (atomic per file, not per run).
- whole apply: ``forgepatch apply --in-place`` wall time on the same tree (start-up and the
  series included), to put the difference in proportion.

    python bench/journal.py [--version 0.5.23] [--rounds 15]

Prints JSON (medians; the two write modes alternate so load hits both alike).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]


def plain_write(package: Path, files: dict[str, bytes]) -> None:
    staged = []
    for rel, data in sorted(files.items()):
        target = package / rel
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".forgepatch", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        staged.append((tmp, target))
    for tmp, target in staged:
        os.replace(tmp, target)


def journal_write(package: Path, files: dict[str, bytes]) -> None:
    from forgepatch.infra.journal import commit, open_tree

    with open_tree(package, "apply --in-place", write=True):
        commit(package, files, "apply --in-place")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", default="0.5.23")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()

    from forgepatch.config import load_matrix
    from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES
    from forgepatch.patching.series import load_series, run_series
    from forgepatch.patching.trees import DirTree
    from forgepatch.sources import pypi_tree

    src = pypi_tree(args.version)
    work = Path(tempfile.mkdtemp(prefix="bench-journal-"))
    try:
        shutil.copytree(src.package, work / "sglang")
        package = work / "sglang"
        res = run_series(load_series(load_matrix(SHIPPED_MATRIX), "sm120", SHIPPED_PATCHES),
                         DirTree(package, pristine=True), args.version)
        patched = res.changed_bytes()
        original = {rel: (package / rel).read_bytes() for rel in patched}
        times: dict[str, list[float]] = {"journal": [], "plain": []}
        for i in range(args.rounds):
            for mode in (("journal", "plain") if i % 2 else ("plain", "journal")):
                write = journal_write if mode == "journal" else plain_write
                t0 = time.perf_counter()
                write(package, patched)
                times[mode].append(time.perf_counter() - t0)
                write(package, original)  # back to the original (not timed)
        assert not (package / ".forgepatch").exists()
        walls = []
        for _ in range(3):
            shutil.rmtree(work / "apply", ignore_errors=True)
            shutil.copytree(package, work / "apply" / "sglang")
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "forgepatch", "apply", "--arch", "sm120", "--source",
                            str(work / "apply"), "--in-place"], check=True, capture_output=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
            walls.append(time.perf_counter() - t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    journal_ms = statistics.median(times["journal"]) * 1e3
    plain_ms = statistics.median(times["plain"]) * 1e3
    wall_ms = statistics.median(walls) * 1e3
    print(json.dumps({
        "version": args.version, "files": len(patched), "rounds": args.rounds,
        "journal_ms": round(journal_ms, 2), "plain_ms": round(plain_ms, 2),
        "ratio": round(journal_ms / plain_ms, 1),
        "apply_in_place_wall_ms": round(wall_ms, 1),
        "journal_share_of_apply": f"{(journal_ms - plain_ms) / wall_ms:.1%}",
    }, indent=1))


if __name__ == "__main__":
    main()
