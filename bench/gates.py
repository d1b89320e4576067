"""Benchmark: `forgepatch gates` on a full SGLang release tree (default 0.5.23, from its PyPI
wheel, cached), side by side with baselines, in one run:

- inventory: ``inventory()`` (partial parsing + analysis), ``--rounds`` times, cold (no memo);
- baseline ``ast``: ``ast.parse`` of every ``.py`` file of the tree (what a plain stdlib scan
  costs before any analysis);
- baseline ``ast (token files)``: ``ast.parse`` of the files the byte prefilter keeps, whole;
- memo: ``source_inventory`` answered from the inventory memo (an immutable source, again);
- diff: ``diff()`` of two inventories (0.5.22 -> 0.5.23).

Wall and CPU (process) seconds; the machine is shared, so compare the ratios.

    python bench/gates.py [--version 0.5.23] [--rounds 3]

Prints JSON. Goal (issue 14): inventory <= 2 s on the full 0.5.23 tree.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]


def timed(fn, rounds: int) -> dict:
    wall, cpu = [], []
    for _ in range(rounds):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return {"wall_median_s": round(statistics.median(wall), 3), "cpu_median_s": round(statistics.median(cpu), 3),
            "wall_s": [round(x, 3) for x in wall]}


def _parse_each(sources) -> None:
    for data in sources:  # each tree dropped at once: no garbage-collector pressure
        ast.parse(data)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", default="0.5.23")
    ap.add_argument("--previous", default="0.5.22")
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()

    from forgepatch.gates.diff import diff
    from forgepatch.gates.inventory import inventory
    from forgepatch.gates.scan import candidates, read_tree
    from forgepatch.gates.service import source_inventory
    from forgepatch.sources import resolve_source

    package = Path(resolve_source(f"pypi:{opts.version}").package)
    files = read_tree(package)
    kept = candidates(files)
    out: dict = {"version": opts.version, "files": len(files), "mb": round(sum(map(len, files.values())) / 2**20, 1),
                 "token_files": len(kept)}
    invs = []
    out["inventory"] = timed(lambda: invs.append(inventory(package, f"pypi:{opts.version}", opts.version)), opts.rounds)
    out["gates"] = len(invs[-1].gates)
    out["baseline_ast_all_files"] = timed(lambda: _parse_each(files.values()), opts.rounds)
    out["baseline_ast_token_files"] = timed(lambda: _parse_each(files[rel] for rel in kept), opts.rounds)
    for name in ("baseline_ast_all_files", "baseline_ast_token_files"):
        out[f"ratio_inventory_over_{name}_cpu"] = round(out["inventory"]["cpu_median_s"] / out[name]["cpu_median_s"], 3)
    source_inventory(f"pypi:{opts.version}")  # fill the memo
    out["memo"] = timed(lambda: source_inventory(f"pypi:{opts.version}"), opts.rounds)
    prev = inventory(Path(resolve_source(f"pypi:{opts.previous}").package), f"pypi:{opts.previous}", opts.previous)
    out["diff"] = timed(lambda: diff(prev, invs[-1]), opts.rounds)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
