"""`forgepatch cache info|prune` on a cache directory laid out as forgepatch lays it out: sizes
by kind; prune removes only entries forgepatch can make again and that are older than the
cut-off, never locks or a release's pending tags, never what it does not know."""

from __future__ import annotations

import os
import time
from pathlib import Path

from support.cli import forgepatch

ROOT = Path(__file__).resolve().parents[1]


def make(path: Path, size: int, age_days: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    t = time.time() - age_days * 86400
    os.utime(path, (t, t))


def test_cache_info_and_prune(tmp_path):
    cache = tmp_path / "cache"
    make(cache / "wheels" / "0.5.2" / "sglang-0.5.2-py3-none-any.whl", 5000, 90)
    make(cache / "wheels" / "0.5.23" / "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", 7000, 1)
    make(cache / "contexts" / "old-sm120" / "Dockerfile", 300, 60)
    make(cache / "locks" / "tree.lock", 10, 400)
    make(cache / "pending-tags" / "forgepatch-p23-sm120.json", 20, 400)
    make(cache / "torch-cpu" / "torch" / "__init__.py", 50, 400)  # not forgepatch's: left alone
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), FORGEPATCH_CACHE_DIR=str(cache))

    info = forgepatch("cache", "info", "--json", env=env)
    assert info.rc == 0, info.err
    doc = info.json()
    assert doc["kinds"]["wheels"] == {"entries": 2, "bytes": 12000, "files": 2}
    assert doc["bytes"] == 12000 + 300 + 10 + 20 + 50

    dry = forgepatch("cache", "prune", "--dry-run", "--json", env=env)
    assert dry.rc == 0 and sorted(Path(e["path"]).name for e in dry.json()["removed"]) == ["0.5.2", "old-sm120"]
    assert (cache / "wheels" / "0.5.2").exists()  # a dry run removes nothing

    r = forgepatch("cache", "prune", env=env)
    assert r.rc == 0, r.err
    assert r.out.strip().splitlines()[-1] == "removed 2 entries, 5.2 KiB"
    assert not (cache / "wheels" / "0.5.2").exists() and not (cache / "contexts" / "old-sm120").exists()
    assert (cache / "wheels" / "0.5.23").exists()  # recent: kept
    everything = forgepatch("cache", "prune", "--all", "--json", env=env)
    assert [Path(e["path"]).name for e in everything.json()["removed"]] == ["0.5.23"]
    for kept in ("locks/tree.lock", "pending-tags/forgepatch-p23-sm120.json", "torch-cpu/torch/__init__.py"):
        assert (cache / kept).exists(), kept
