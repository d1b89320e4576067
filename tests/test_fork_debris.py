"""`forgepatch fork` leaves no debris: a killed run's worktree is removed by the next run,
`git fsck` is clean after it, and a leftover ref lock gives one line with the fix.

Real git repositories of SGLang releases; real `forgepatch fork` processes killed with
SIGKILL (their whole process group: forgepatch and the git commands it runs) while their
private worktree exists, and a worktree left exactly as a killed `git worktree add` leaves
it (locked "initializing", HEAD pointing at nothing: what `git fsck` reported in the field).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from support.forkcli import run_subprocess, write_matrix

BRANCH = "forgepatch/sm120/v0_5_20"


def git(repo, *args, check=True):
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def git_dir(repo: Path) -> Path:
    return Path(git(repo, "rev-parse", "--absolute-git-dir").stdout.strip())


def fork_args(tmp_path: Path, repo: Path) -> tuple:
    from forgepatch.paths import SHIPPED_PATCHES

    return ("--config", write_matrix(tmp_path), "--patches", SHIPPED_PATCHES, "fork", "--arch", "sm120",
            "--repo", repo, "--rev", "v0.5.20", "--pin", "v0_5_20", "--json")


def debris(repo: Path) -> list[str]:
    gd = git_dir(repo)
    found = [str(p.relative_to(gd)) for p in (gd / "worktrees").glob("*")]
    found += [str(p.relative_to(gd)) for p in (gd / "forgepatch-worktrees").glob("*")]
    return found


def assert_clean(repo: Path) -> None:
    gd = git_dir(repo)
    assert debris(repo) == [], {str(p): p.read_text()[:100] for p in gd.glob("*worktrees/**/*") if p.is_file()}
    listing = git(repo, "worktree", "list", "--porcelain").stdout
    assert listing.count("worktree ") == 1, listing  # the user's checkout only
    fsck = git(repo, "fsck", "--no-dangling", check=False)
    assert fsck.returncode == 0 and "error" not in fsck.stderr + fsck.stdout, fsck.stderr


def assert_whole_branch_or_none(repo: Path) -> None:
    """A killed run never leaves a partial branch: absent, or the full series with trailers."""
    head = git(repo, "rev-parse", "--verify", "-q", BRANCH, check=False).stdout.strip()
    if head:
        log = git(repo, "log", "--format=%(trailers:key=Forgepatch-Patch,valueonly)", f"v0.5.20..{head}").stdout
        assert [ln for ln in log.splitlines() if ln.strip()] == ["sm120-flashinfer-allreduce-fusion"]


def test_killed_forks_leave_nothing_the_next_run_keeps(nightly_clone, tmp_path):
    repo = nightly_clone
    args = fork_args(tmp_path, repo)
    admin = git_dir(repo) / "worktrees"
    left_any = 0
    for delay in (0.0, 0.0, 0.02, 0.05, 0.1, 0.2):
        git(repo, "update-ref", "-d", f"refs/heads/{BRANCH}", check=False)
        proc = run_subprocess(*args, start_new_session=True)
        deadline = time.monotonic() + 120
        while not (admin.is_dir() and any(admin.iterdir())) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(delay)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        assert_whole_branch_or_none(repo)
        left = debris(repo)
        left_any += bool(left)
        nxt = run_subprocess(*args)
        out, err = nxt.communicate(timeout=300)
        assert nxt.returncode == 0, err
        assert json.loads(out)["status"] in ("created", "unchanged")
        notes = [ln for ln in err.splitlines() if "interrupted fork" in ln]
        assert bool(notes) == any(p.startswith("forgepatch-worktrees/") or p.startswith("worktrees/") for p in left), (left, err)
        assert "Traceback" not in err
        assert_clean(repo)
        assert_whole_branch_or_none(repo)
    assert left_any >= 3  # the kills did land while a worktree existed


def test_a_worktree_add_killed_midway_is_removed_and_fsck_is_clean(nightly_clone, tmp_path):
    repo = nightly_clone
    gd = git_dir(repo)
    wt = gd / "forgepatch-worktrees" / "sm120-v0_5_20"
    wt.parent.mkdir()
    git(repo, "worktree", "add", "--detach", "--no-checkout", "-q", str(wt), "v0.5.20")
    entry = next((gd / "worktrees").iterdir())
    # what `git worktree add` leaves when killed before it sets HEAD (and unlocks)
    (entry / "locked").write_text("initializing")
    (entry / "HEAD").write_text("0" * 40 + "\n")
    (wt.with_name(wt.name + ".msg")).write_text("half a commit message")
    assert "points at nothing" in git(repo, "fsck", check=False).stderr
    git(repo, "worktree", "prune")
    assert entry.is_dir()  # git's own prune keeps a locked entry: only forgepatch can clear it
    proc = run_subprocess(*fork_args(tmp_path, repo))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert json.loads(out)["status"] == "created"
    assert err.strip().splitlines()[-1].endswith("removed 1 worktree(s) left by an interrupted fork"), err
    assert_clean(repo)


def test_a_leftover_ref_lock_gives_one_line_with_the_fix(nightly_clone, tmp_path):
    repo = nightly_clone
    lock = git_dir(repo) / "refs" / "heads" / f"{BRANCH}.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    args = fork_args(tmp_path, repo)
    proc = run_subprocess(*args)
    out, err = proc.communicate(timeout=300)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert str(lock) in lines[0] and "interrupted git command" in lines[0]
    fix = lines[0].split("run again: ", 1)[1]
    assert shlex.split(fix) == ["rm", str(lock)]
    subprocess.run(fix, shell=True, check=True)  # the command it prints fixes it
    proc = run_subprocess(*args)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert json.loads(out)["status"] == "created"
    assert_clean(repo)
