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


def test_prune_drops_apply_records_only_of_trees_that_are_gone(tmp_path, monkeypatch):
    """`applied/` (what `apply --reverse` undoes from) is state: kept whatever its age while
    its tree exists, pruned once the tree is gone; an unreadable record is kept."""
    import json
    import shutil

    from forgepatch.patching import undo

    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), FORGEPATCH_CACHE_DIR=str(cache))
    monkeypatch.setenv("FORGEPATCH_CACHE_DIR", str(cache))  # undo.save writes where the CLI reads
    trees = {}
    for name in ("kept", "gone"):
        pkg = tmp_path / name / "sglang"
        pkg.mkdir(parents=True)
        (pkg / "a.py").write_bytes(b"x = 1\r\n")
        undo.save(pkg, {"a.py": b"x = 2\r\n"}, {"arch": "sm120"})
        trees[name] = undo.records_dir(pkg)
    bad = cache / "applied" / ("0" * 32)
    bad.mkdir()
    (bad / "1.json").write_text("{")
    for record in trees["kept"].glob("*.json"):
        t = time.time() - 400 * 86400
        os.utime(record, (t, t))
    shutil.rmtree(tmp_path / "gone")
    r = forgepatch("cache", "prune", "--json", env=env)
    assert r.rc == 0, r.err
    assert [e["path"] for e in r.json()["removed"]] == [str(trees["gone"])]
    assert trees["kept"].is_dir() and not trees["gone"].exists() and bad.is_dir()
    assert json.loads(next(trees["kept"].glob("*.json")).read_text())["tree"] == str(tmp_path / "kept" / "sglang")
