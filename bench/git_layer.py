"""Benchmark: the git layer (``forgepatch.infra.gitrepo``, on GitPython) against raw ``git``
subprocesses, side by side on the same repository: list the package tree of each of 10
revisions (releases 0.5.14 .. 0.5.23 as a git history) and read every distinct ``.py`` blob.

- gitpython: ``GitRepo.tree`` + ``GitTree.prefetch`` (GitPython's persistent ``cat-file --batch``)
- raw: ``git ls-tree`` + one ``git cat-file --batch`` fed by a writer thread (the layer before
  GitPython, pipelined: the fastest plain-git way to read many blobs)

This is the part of a cold ``forgepatch drift`` scan the git layer is responsible for.

    python bench/git_layer.py [--first 14] [--last 23] [--rounds 3]

Prints JSON (medians of the rounds, alternating the two so load hits both alike).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]


def raw_read(repo: Path, revs: list[str], package_dir: str = "python/sglang") -> int:
    seen: dict[str, None] = {}
    for rev in revs:
        out = subprocess.run(["git", "ls-tree", "-r", "-z", "--full-tree", rev, "--", f"{package_dir}/"], cwd=repo,
                             capture_output=True, check=True).stdout.decode()
        for entry in out.split("\0"):
            if entry:
                meta, path = entry.split("\t", 1)
                if path.endswith(".py"):
                    seen.setdefault(meta.split()[2])
    oids = list(seen)
    proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def feed() -> None:
        proc.stdin.write(b"".join(o.encode() + b"\n" for o in oids))
        proc.stdin.close()

    threading.Thread(target=feed, daemon=True).start()
    total = 0
    for _ in oids:
        size = int(proc.stdout.readline().split()[2])
        total += len(proc.stdout.read(size + 1)) - 1
    proc.wait()
    return total


def gitpython_read(repo: Path, revs: list[str]) -> int:
    from forgepatch.infra.gitrepo import GitRepo

    total, done = 0, set()
    with GitRepo(repo) as r:
        for rev in revs:
            tree = r.tree(r.resolve(rev))
            todo = list({tree.key(rel): rel for rel in tree.paths() if tree.key(rel) not in done}.values())
            tree.prefetch(todo)
            for rel in todo:
                done.add(tree.key(rel))
                total += len(tree.read(rel))
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--first", type=int, default=14)
    ap.add_argument("--last", type=int, default=23)
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    from support.nightlies import build_nightlies_repo

    releases = [f"0.5.{n}" for n in range(opts.first, opts.last + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_nightlies_repo(Path(tmp) / "sglang", releases)
        revs = [f"v{v}" for v in releases]
        times: dict[str, list[float]] = {"gitpython": [], "raw": []}
        sizes = {}
        for _ in range(opts.rounds):
            for name, fn in (("gitpython", lambda: gitpython_read(repo, revs)), ("raw", lambda: raw_read(repo, revs))):
                t = time.perf_counter()
                sizes[name] = fn()
                times[name].append(time.perf_counter() - t)
        assert sizes["gitpython"] == sizes["raw"], sizes
        med = {k: round(statistics.median(v), 3) for k, v in times.items()}
        print(json.dumps({"revs": len(revs), "bytes": sizes["raw"], "gitpython_s": med["gitpython"], "raw_s": med["raw"],
                          "ratio_gitpython_vs_raw": round(med["gitpython"] / med["raw"], 2),
                          "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()}}, indent=2))


if __name__ == "__main__":
    main()
