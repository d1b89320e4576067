"""`forgepatch fork` on a real git repo of SGLang releases: branches, commits and trailers
checked with git itself; the user's checkout never touched; the run lock."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from support.forkcli import run_inprocess, run_subprocess, write_matrix
from support.nightlies import PACKAGE_DIR, commit_on, show, snapshot, without_function

BRANCH = "forgepatch/sm120/v0_5_20"


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def config(tmp_path):
    return write_matrix(tmp_path)


@pytest.fixture
def patches(tmp_path):
    """A private copy of the shipped patches (tests edit it)."""
    from forgepatch.paths import SHIPPED_PATCHES

    dest = tmp_path / "patches"
    shutil.copytree(SHIPPED_PATCHES, dest)
    return dest


def fork(capsys, config, patches, repo, *args):
    rc, out, err = run_inprocess(capsys, "--config", config, "--patches", patches, "fork", "--arch", "sm120", "--repo", repo, "--json", *args)
    return rc, (json.loads(out) if out.strip() else None), err


def make_dirty(repo):
    """Uncommitted work in the user's checkout: a modified tracked file, a staged change
    and an untracked file."""
    (repo / "README.md").write_text("local edits in progress\n")
    comm = repo / PACKAGE_DIR / "srt/server_args.py"
    comm.write_bytes(comm.read_bytes() + b"\n# staged local change\n")
    git(repo, "add", str(comm))
    (repo / "notes.txt").write_text("untracked\n")


def test_fork_creates_branch_with_one_commit_per_patch_and_trailers(nightly_clone, config, patches, capsys):
    from forgepatch.arch import get_arch
    from forgepatch.infra.gitrepo import GitRepo
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.patchset import load_patches, patchset_hash

    repo = nightly_clone
    make_dirty(repo)
    before = snapshot(repo)
    rc, doc, err = fork(capsys, config, patches, repo, "--rev", "v0.5.20", "--pin", "v0_5_20")
    assert rc == 0, err
    assert snapshot(repo) == before  # branch, index, tracked/untracked/staged files untouched
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1  # private worktree removed

    upstream = git(repo, "rev-parse", "v0.5.20")
    series = load_patches(patches, ["sm120-flashinfer-allreduce-fusion"])
    with GitRepo(repo) as r:
        expected = run_patches(r.tree(upstream), series, get_arch("sm120"), "0.5.20")
    applied = [p for p in expected.patches if p.changes]
    assert doc["status"] == "created" and doc["upstream"] == upstream
    head = git(repo, "rev-parse", BRANCH)
    assert doc["head"] == head
    commits = git(repo, "rev-list", "--first-parent", "--reverse", f"{upstream}..{BRANCH}").split()
    assert len(commits) == len(applied) >= 1
    assert git(repo, "rev-parse", f"{commits[0]}^") == upstream
    for sha, patch in zip(commits, applied):
        assert git(repo, "log", "-1", "--format=%s", sha) == patch.summary
        trailers = git(repo, "log", "-1", "--format=%(trailers:only,unfold)", sha).splitlines()
        assert trailers == [
            f"Forgepatch-Patch: {patch.patch_id}",
            "Forgepatch-Arch: sm120",
            f"Forgepatch-Pin: {doc['pin']}",
            f"Forgepatch-Upstream: {upstream}",
            "Forgepatch-Upstream-Version: 0.5.20",
            f"Forgepatch-Patchset: {patchset_hash(series)}",
        ]
        changed = set(git(repo, "diff", "--name-only", f"{sha}^", sha).split())
        assert changed == {f"{PACKAGE_DIR}/{rel}" for rel in patch.changes}
    # the branch holds exactly the engine's output, nothing else
    all_changed = set(git(repo, "diff", "--name-only", upstream, head).split())
    assert all_changed == {f"{PACKAGE_DIR}/{rel}" for rel in expected.changed}
    for rel, text in expected.changed.items():
        assert show(repo, head, f"{PACKAGE_DIR}/{rel}") == text.encode("utf-8")


def test_rerun_is_a_no_op_and_changed_patch_keeps_previous_head(nightly_clone, config, patches, capsys):
    repo = nightly_clone
    rc, first, err = fork(capsys, config, patches, repo, "--rev", "v0.5.20", "--pin", "v0_5_20")
    assert rc == 0, err
    objects_before = git(repo, "count-objects", "-v")
    rc, again, err = fork(capsys, config, patches, repo, "--rev", "v0.5.20", "--pin", "v0_5_20")
    assert rc == 0, err
    assert again["status"] == "unchanged" and again["head"] == first["head"]
    assert git(repo, "rev-parse", BRANCH) == first["head"]
    assert git(repo, "for-each-ref", "refs/forgepatch/") == ""
    assert [c["sha"] for c in again["commits"]] == [c["sha"] for c in first["commits"]]
    del objects_before  # new (unreferenced) objects may exist; refs are what matter

    # a changed patch file: new head, old head kept under refs/forgepatch/previous/...
    patch_file = patches / "sm120-flashinfer-allreduce-fusion.toml"
    text = patch_file.read_text()
    patch_file.write_text(text.replace('summary = "', 'summary = "[v2] ', 1))
    rc, third, err = fork(capsys, config, patches, repo, "--rev", "v0.5.20", "--pin", "v0_5_20")
    assert rc == 0, err
    assert third["status"] == "updated" and third["head"] != first["head"]
    assert third["previous_head"] == first["head"]
    assert third["previous_ref"].startswith("refs/forgepatch/previous/sm120/v0_5_20/")
    assert git(repo, "rev-parse", third["previous_ref"]) == first["head"]
    assert git(repo, "log", "-1", "--format=%s", BRANCH).startswith("[v2] ")
    assert first["head"] in git(repo, "reflog", "--format=%H", BRANCH).split()
    assert third["patchset"] != first["patchset"]


def test_default_pin_name_and_matrix_rev_pin(nightly_clone, config, patches, capsys):
    repo = nightly_clone
    sha = git(repo, "rev-parse", "v0.5.15")
    rc, doc, err = fork(capsys, config, patches, repo, "--rev", "v0.5.15")  # a tag: the branch is named after it
    assert rc == 0, err
    assert doc["branch"] == "forgepatch/sm120/v0.5.15" and doc["upstream"] == sha
    rc, doc, err = fork(capsys, config, patches, repo, "--rev", sha)  # a bare commit: its short SHA
    assert rc == 0, err
    assert doc["branch"] == f"forgepatch/sm120/{sha[:12]}"
    assert run_inprocess(capsys, "--config", config, "pin", "add", "nightly", "--rev", sha, "--repo", repo)[0] == 0
    rc, doc, err = fork(capsys, config, patches, repo, "--pin", "nightly")
    assert rc == 0, err
    assert doc["branch"] == "forgepatch/sm120/nightly" and doc["upstream"] == sha
    rc, doc, err = fork(capsys, config, patches, repo, "--rev", sha)  # a matrix pin names that commit
    assert rc == 0 and doc["branch"] == "forgepatch/sm120/nightly", err
    other = git(repo, "rev-parse", "v0.5.20")
    rc, doc, err = fork(capsys, config, patches, repo, "--rev", "v0.5.20", "--pin", "nightly")
    assert rc == 2 and doc is None
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"'nightly' is git {sha[:12]} (version 0.5.15)" in line and f"'v0.5.20' is git {other[:12]} (version 0.5.20)" in line


def test_drift_exits_1_and_moves_no_branch(nightly_clone, config, patches, capsys):
    repo = nightly_clone
    assert fork(capsys, config, patches, repo, "--rev", "v0.5.20", "--pin", "v0_5_20")[0] == 0
    head = git(repo, "rev-parse", BRANCH)
    comm = f"{PACKAGE_DIR}/srt/layers/communicator.py"
    drifted = commit_on(repo, "v0.5.20", {comm: without_function(show(repo, "v0.5.20", comm), "apply_flashinfer_allreduce_fusion")},
                        "refactor: drop apply_flashinfer_allreduce_fusion")
    refs_before = git(repo, "for-each-ref")
    rc, doc, err = fork(capsys, config, patches, repo, "--rev", drifted, "--pin", "v0_5_20")
    assert rc == 1
    assert doc["status"] == "drift"
    sites = [s for p in doc["patches"] for s in p["sites"] if s["status"] == "drift"]
    assert [s["site"] for s in sites] == ["runtime-fusion-gate"]
    assert git(repo, "rev-parse", BRANCH) == head
    assert git(repo, "for-each-ref") == refs_before
    rc, out, err = run_inprocess(capsys, "--config", config, "--patches", patches, "fork", "--arch", "sm120", "--repo", repo, "--rev", drifted)
    assert rc == 1 and "runtime-fusion-gate" in err and "not moved" in err


def test_branch_checked_out_by_user_is_refused(nightly_clone, config, patches, capsys):
    repo = nightly_clone
    assert fork(capsys, config, patches, repo, "--rev", "v0.5.20", "--pin", "v0_5_20")[0] == 0
    git(repo, "checkout", "-q", BRANCH)
    before = snapshot(repo)
    patch_file = patches / "sm120-flashinfer-allreduce-fusion.toml"
    patch_file.write_text(patch_file.read_text().replace('summary = "', 'summary = "[v2] ', 1))
    rc, doc, err = fork(capsys, config, patches, repo, "--rev", "v0.5.20", "--pin", "v0_5_20")
    assert rc == 2 and "checked out" in err and len(err.strip().splitlines()) == 1
    assert snapshot(repo) == before


HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from forgepatch.infra.gitrepo import GitRepo
    with GitRepo(Path(sys.argv[1])).lock():
        print("locked", flush=True)
        sys.stdin.readline()
""")


def test_lock_stops_a_concurrent_run(nightly_clone, config, patches):
    repo = nightly_clone
    from support.forkcli import _src
    import os

    env = {**os.environ, "PYTHONPATH": str(_src())}
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(repo)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "locked"
        args = ("--config", config, "--patches", patches, "fork", "--arch", "sm120", "--repo", repo, "--rev", "v0.5.20", "--pin", "v0_5_20")
        blocked = run_subprocess(*args)
        out, err = blocked.communicate(timeout=120)
        assert blocked.returncode == 1
        assert err.strip().splitlines() == [err.strip()] and "another forgepatch run holds the lock" in err
        assert subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "-q", BRANCH], capture_output=True).returncode != 0
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
    ok = run_subprocess(*args)
    out, err = ok.communicate(timeout=300)
    assert ok.returncode == 0, err
    assert git(repo, "rev-parse", BRANCH)


def test_two_forks_at_once_one_waits_out(nightly_clone, config, patches):
    """Two real `forgepatch fork` processes on the same repo: never both inside the lock;
    the branch ends at a consistent head."""
    repo = nightly_clone
    args = ("--config", config, "--patches", patches, "fork", "--arch", "sm120", "--repo", repo, "--rev", "v0.5.20", "--pin", "v0_5_20", "--json")
    procs = [run_subprocess(*args) for _ in range(2)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    codes = sorted(r[2] for r in results)
    assert codes in ([0, 0], [0, 1]), results
    for out, err, rc in results:
        if rc == 1:
            assert "another forgepatch run holds the lock" in err
        else:
            assert json.loads(out)["status"] in ("created", "unchanged")
    assert sum(json.loads(out)["status"] == "created" for out, _, rc in results if rc == 0) == 1
    assert git(repo, "for-each-ref", "refs/forgepatch/") == ""


def _bad(capsys, *args):
    rc, out, err = run_inprocess(capsys, *args)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_fork_bad_input(nightly_clone, config, patches, tmp_path, capsys):
    base = ("--config", config, "--patches", patches, "fork", "--arch", "sm120")
    assert "unknown revision" in _bad(capsys, *base, "--repo", nightly_clone, "--rev", "v9.9.9")
    plain = tmp_path / "plain"
    plain.mkdir()
    assert "not a git repository" in _bad(capsys, *base, "--repo", plain, "--rev", "HEAD")
    empty = tmp_path / "empty"
    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    (empty / "README.md").write_text("not sglang\n")
    subprocess.run(["git", "-C", str(empty), "add", "README.md"], check=True)
    subprocess.run(["git", "-C", str(empty), "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "x"], check=True)
    assert "no SGLang package" in _bad(capsys, *base, "--repo", empty, "--rev", "HEAD")
    assert "not configured" in _bad(capsys, "--config", config, "--patches", patches, "fork", "--arch", "sm103", "--repo", nightly_clone, "--rev", "HEAD")
