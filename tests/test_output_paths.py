"""One rule for every output path (issue 28 item 2): a regular file (replaced atomically) or a
new name; never a device, FIFO, directory or a symlink to one; ``-`` is stdout where it makes
sense. Device nodes are made with mknod in a temp dir (never /dev). ``bake --out`` and
``results merge --out`` used to replace such a node with a regular file (exit 0)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from forgepatch.infra.atomic import write_atomic
from support.badinput import run
from support.smoke_matrix import profile, run_cli, write_matrix


def _nodes(tmp) -> dict[str, os.PathLike]:
    """Every kind of path an output must refuse, made in ``tmp``."""
    nodes = tmp / "nodes"
    nodes.mkdir()
    out = {}
    if os.geteuid() == 0:
        os.mknod(nodes / "chardev", 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null twin
        os.symlink(nodes / "chardev", nodes / "link-to-chardev")
        out["chardev"] = nodes / "chardev"
        out["link-to-chardev"] = nodes / "link-to-chardev"
    os.mkfifo(nodes / "fifo")
    os.mkdir(nodes / "dir")
    os.symlink(nodes / "dir", nodes / "link-to-dir")
    os.symlink(nodes / "fifo", nodes / "link-to-fifo")
    os.symlink(nodes / "nowhere", nodes / "dangling")
    os.symlink(nodes / "loop", nodes / "loop")
    out.update({k: nodes / k for k in ("fifo", "dir", "link-to-dir", "link-to-fifo", "dangling", "loop")})
    return out


def _kinds(nodes) -> dict[str, int]:
    return {k: os.lstat(p).st_mode for k, p in nodes.items()}


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """A real `forgepatch smoke --json` document (one command job, local runner)."""
    tmp = tmp_path_factory.mktemp("outpaths")
    config = write_matrix(tmp / "matrix.toml", {"cmd": profile("cmd", kind="command", command="sh -c 'echo ran'")},
                          sm120=["cmd"])
    r = run_cli("--config", config, "smoke", "--runner", "local", "--json", "--logs", tmp / "logs")
    assert r.returncode == 0, r.stderr
    (tmp / "shard.json").write_text(r.stdout)
    return tmp


@pytest.mark.parametrize("flag", ["--out", "--markdown-out", "--junit"])
def test_results_merge_never_replaces_a_special_file(shard, tmp_path, flag):
    nodes = _nodes(tmp_path)
    before = _kinds(nodes)
    for name, node in nodes.items():
        args = ["--out", tmp_path / "merged.json"] if flag != "--out" else []
        r = run("results", "merge", shard / "shard.json", flag, node, *args)  # in-process: quick
        assert r.rc == 2 and len(r.lines) == 1 and flag in r.lines[0], (name, r.err)
        assert "internal error" not in r.err
    assert _kinds(nodes) == before
    assert not (tmp_path / "merged.json").exists()  # nothing written when one output is refused


def test_results_merge_to_stdout_and_to_a_regular_file(shard, tmp_path):
    r = run_cli("results", "merge", shard / "shard.json", "--out", "-")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["schema"] == "forgepatch.smoke-results/2"
    assert not (shard.parent / "-").exists() and not os.path.exists("-")
    existing = tmp_path / "merged.json"
    existing.write_text("old")
    os.symlink(existing, tmp_path / "link.json")  # a symlink to a regular file is a file
    for path in (existing, tmp_path / "new.json", tmp_path / "link.json"):
        r = run_cli("results", "merge", shard / "shard.json", "--out", path)
        assert r.returncode == 0, r.stderr
        assert json.loads(path.read_text())["schema"] == "forgepatch.smoke-results/2"


def test_smoke_reports_refuse_a_special_file_before_any_job_runs(shard, tmp_path):
    nodes = _nodes(tmp_path)
    before = _kinds(nodes)
    for flag in ("--junit", "--markdown-out"):
        for name, node in nodes.items():
            r = run("--config", shard / "matrix.toml", "smoke", "--runner", "local", flag, node,
                    "--logs", tmp_path / "logs")
            assert r.rc == 2 and len(r.lines) == 1 and flag in r.lines[0], (name, r.err)
    assert _kinds(nodes) == before
    assert not (tmp_path / "logs").exists()  # refused before a job ran


def test_bake_never_replaces_a_special_file(tmp_path):
    nodes = _nodes(tmp_path)
    before = _kinds(nodes)
    for name, node in nodes.items():
        r = run("bake", "--out", node, "--arch", "sm120", "--contexts", tmp_path / "ctx")
        assert r.rc == 2 and len(r.lines) == 1 and "--out" in r.lines[0], (name, r.err)
    assert _kinds(nodes) == before
    assert not (tmp_path / "ctx").exists()  # refused before any context was assembled


def test_bake_to_stdout(tmp_path):
    r = run_cli("bake", "--out", "-", "--arch", "sm120", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["target"] and not (tmp_path / "-").exists() and (tmp_path / "bake-contexts").is_dir()


def test_write_atomic_refuses_to_replace_a_special_file(tmp_path):
    """The last line of defence behind the CLI's check: the one writer everything uses."""
    nodes = _nodes(tmp_path)
    before = _kinds(nodes)
    for name in ("fifo", "dir", "link-to-dir", "link-to-fifo", "chardev", "link-to-chardev"):
        if name in nodes:
            with pytest.raises(OSError, match="refusing to replace it"):
                write_atomic(nodes[name], "x")
    assert _kinds(nodes) == before
    assert sorted(os.listdir(tmp_path / "nodes")) == sorted(p.name for p in nodes.values())  # no temp files
