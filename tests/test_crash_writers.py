"""Every writer besides ``apply --in-place`` survives a crash, Ctrl-C, a full disk, a target it
cannot replace and a concurrent run (issue 27; ``apply --in-place`` is tests/test_crash_safety.py).

Fault injection as there (tests/support/killmatrix.py): a first strace pass lists the run's
syscalls that change the file system (rename, unlink, mkdir, rmdir, link, and for the newer
cases each O_CREAT open, of the worker process), then the run is killed with SIGKILL and
interrupted with SIGINT at each of them in turn; after each, the next command says
what it finished or undid in at most one line, and the directory is the original or the
finished one, nothing else in it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, forgepatch
from tests.support.killmatrix import ENV, _cli, _strace, crash_matrix, digest

PATIENT = {**ENV, "FORGEPATCH_LOCK_TIMEOUT": "500"}  # six runs queue on a shared 2-core CI machine


# -- init --------------------------------------------------------------------------------------
def _empty(d: Path) -> Path:
    d.mkdir(parents=True)
    return d


def _pin_names(d: Path) -> list[str]:
    run = _cli(["pin", "list", "--json"], d)
    assert run.returncode == 0, run.stderr
    return [row["name"] for row in json.loads(run.stdout)]


@pytest.fixture(scope="module")
def initialised(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("init") / "fork"
    d.mkdir()
    assert _cli(["init", "--dir", d], d).returncode == 0
    return d


def test_init_killed_or_interrupted_at_each_syscall_leaves_none_or_all(tmp_path, initialised):
    finished = digest(initialised)
    states = crash_matrix(tmp_path, _empty, ["init", "--dir", "."], lambda d: _cli(["pin", "list"], d),
                          original={}, finished=finished, recovered="init")
    # killed before the journal's rename: nothing; at or after it: everything
    assert set(states.values()) == {"original", "finished"}
    # and init run again after any of them ends with the scaffold, exit 0 or a one-line refusal
    d = _empty(tmp_path / "again")
    strace = _strace()
    _cli(["init", "--dir", "."], d, (strace, "-f", "--seccomp-bpf", "-qq", "-e", "inject=rename:signal=KILL:when=2"))
    again = _cli(["init", "--dir", "."], d)
    assert again.returncode == 0 and "completed an interrupted init" in again.stderr, again.stderr
    assert digest(d) == finished


# -- pin add -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def git_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    return repo


def test_pin_add_killed_or_interrupted_at_each_syscall(tmp_path, initialised, git_repo):
    def world(d: Path) -> Path:
        shutil.copytree(initialised, d)
        return d

    args = ["pin", "add", "crash", "--rev", "HEAD", "--repo", git_repo]
    done = world(tmp_path / "done")
    assert _cli(args, done).returncode == 0
    before = _pin_names(initialised)
    assert _pin_names(done) == before + ["crash"]
    states = crash_matrix(tmp_path, world, args, lambda d: _cli(["pin", "list"], d),
                          original=digest(initialised), finished=digest(done), recovered="pin add")
    assert set(states.values()) == {"original", "finished"}


def test_patch_new_killed_or_interrupted_at_each_syscall(tmp_path, initialised):
    """``patch new`` writes one file through the patches directory's journal: killed at any of
    its renames, unlinks, mkdirs or O_CREAT opens, the next command (``patch list``) finds the
    draft whole or absent, and nothing else in the directory."""
    def world(d: Path) -> Path:
        shutil.copytree(initialised, d)
        return d

    args = ["patch", "new", "crash-draft", "--arch", "sm120"]
    done = world(tmp_path / "done")
    assert _cli(args, done).returncode == 0
    assert (done / "patches" / "crash-draft.toml").is_file()

    def listed(d: Path) -> subprocess.CompletedProcess:
        run = _cli(["patch", "list", "--json"], d)
        ids = [row["id"] for row in json.loads(run.stdout)] if run.returncode == 0 else []
        # what patch list shows is what the directory holds: the draft whole, or not there
        assert ("crash-draft" in ids) == (d / "patches" / "crash-draft.toml").is_file(), ids
        return run

    states = crash_matrix(tmp_path, world, args, listed, original=digest(initialised), finished=digest(done),
                          recovered="patch new", creates=True, inside=True, effective=True)
    assert set(states.values()) == {"original", "finished"}


def test_pin_update_killed_or_interrupted_at_each_syscall(tmp_path, initialised, git_repo):
    """``pin update`` re-resolves a pin written by hand (``rev = "HEAD"``) to its full SHA
    through matrix.toml's journal: killed anywhere in the directory, the next command
    (``pin list``) reads the old pin or the resolved one, nothing else left."""
    def world(d: Path) -> Path:
        shutil.copytree(initialised, d)
        with (d / "matrix.toml").open("a", encoding="utf-8") as f:
            f.write(f'\n[pins.moving]\nrev = "HEAD"\nrepo = "{git_repo}"\n')
        return d

    def revs(d: Path) -> subprocess.CompletedProcess:
        run = _cli(["pin", "list", "--json"], d)
        if run.returncode == 0:
            (row,) = [r for r in json.loads(run.stdout) if r["name"] == "moving"]
            assert row["source"].endswith(("@HEAD", sha)), row  # the old pin or the resolved one
        return run

    sha = subprocess.run(["git", "-C", str(git_repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    args = ["pin", "update", "moving"]
    original = digest(world(tmp_path / "original"))
    done = world(tmp_path / "done")
    assert _cli(args, done).returncode == 0
    assert f'rev = "{sha}"' in (done / "matrix.toml").read_text()
    states = crash_matrix(tmp_path, world, args, revs, original=original, finished=digest(done),
                          recovered="pin update", creates=True, inside=True, effective=True)
    assert set(states.values()) == {"original", "finished"}


@pytest.mark.parametrize("runs", [2, 6])
def test_concurrent_pin_adds_lose_no_pin(tmp_path, initialised, git_repo, runs):
    d = shutil.copytree(initialised, tmp_path / "fork")
    before = _pin_names(d)
    with ThreadPoolExecutor(runs) as pool:
        done = list(pool.map(lambda i: _cli(["pin", "add", f"c{i}", "--rev", "HEAD", "--repo", git_repo], d, env=PATIENT), range(runs)))
    assert [r.returncode for r in done] == [0] * runs, [r.stderr for r in done]
    assert sorted(_pin_names(d)) == sorted(before + [f"c{i}" for i in range(runs)])
    assert not (d / ".forgepatch").exists() and not list(d.glob(".matrix.toml.*"))


def test_a_held_matrix_lock_is_waited_for_then_fails_with_one_line(tmp_path, initialised, git_repo):
    from forgepatch.infra.journal import TreeLock

    d = shutil.copytree(initialised, tmp_path / "fork")
    before = digest(d)
    lock = TreeLock(d, "a test holding it")
    lock.acquire(exclusive=True, timeout=0)
    try:
        env = {**ENV, "FORGEPATCH_LOCK_TIMEOUT": "1.5"}
        run = subprocess.run([sys.executable, "-m", "forgepatch", "pin", "add", "x", "--rev", "HEAD", "--repo",
                              str(git_repo)], cwd=d, capture_output=True, text=True, env=env, timeout=120)
        lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
        assert run.returncode == 1 and len(lines) == 2, run.stderr  # "waiting ...", then the error
        assert "waiting up to 1.5 s" in lines[0] and f"pid {os.getpid()} (a test holding it)" in lines[1]
    finally:
        lock.release()
    assert digest(d) == before


# -- the ledger --------------------------------------------------------------------------------
@pytest.mark.parametrize("runs", [2, 6])
def test_concurrent_ledger_appends_lose_no_entry_and_leave_no_lock_in_the_ledger_dir(tmp_path, runs):
    from forgepatch.release.ledger import Ledger, chain_problem

    path = tmp_path / "releases" / "ledger.json"
    code = ("import sys\nfrom forgepatch.combination.ledger import LedgerEntry\nfrom forgepatch.release.ledger import Ledger\n"
            "book = Ledger(sys.argv[1])\nfor i in range(3):\n    with book.lock():\n"
            "        book.append(LedgerEntry(tag=f't{sys.argv[2]}-{i}', pin='p', arch='a', commit='c'))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), str(n)], env=ENV) for n in range(runs)]
    assert [p.wait(timeout=120) for p in procs] == [0] * runs
    entries = Ledger(path).read()
    assert len(entries) == 3 * runs and chain_problem(entries) is None
    assert sorted(p.name for p in path.parent.iterdir()) == ["ledger.json"]  # `git add releases/` adds no lock


# -- apply --out -------------------------------------------------------------------------------
SOURCE = "pypi:0.5.23"


@pytest.fixture(scope="module")
def out_first(tmp_path_factory) -> Path:
    """An --out DIR written once (copied as the "existing DIR" of a case)."""
    d = tmp_path_factory.mktemp("out") / "done"
    run = _cli(["apply", "--arch", "sm120", "--source", SOURCE, "--out", d], d.parent)
    assert run.returncode == 0, run.stderr
    return d


@pytest.fixture(scope="module")
def out_done(out_first) -> dict:
    got = digest(out_first)
    got.pop(".forgepatch-out")
    return got


def _out_state(d: Path, want: dict) -> None:
    got = digest(d)
    record = json.loads((d / ".forgepatch-out").read_text())["files"]
    got.pop(".forgepatch-out")
    assert got == want
    assert {f"sglang/{rel}" for rel in record} == {k for k, v in got.items() if v != "dir"}


@pytest.mark.parametrize("runs", [2, 6])
def test_concurrent_apply_out_into_one_new_dir_wait_for_each_other(tmp_path, out_done, runs):
    d = tmp_path / "new"
    with ThreadPoolExecutor(runs) as pool:
        done = list(pool.map(lambda _: _cli(["apply", "--arch", "sm120", "--source", SOURCE, "--out", d], tmp_path, env=PATIENT),
                             range(runs)))
    assert [r.returncode for r in done] == [0] * runs, [r.stderr[-300:] for r in done]
    assert not any("not written by forgepatch" in r.stderr for r in done)
    _out_state(d, out_done)


def test_ctrl_c_during_apply_out_never_loses_the_copy_or_its_record(tmp_path, out_first, out_done):
    """SIGINT during the swap (its first rename: the old copy aside) and while the copy is
    staged, into an existing and a new DIR: the interrupted run's clean-up never deletes the
    old copy or the record, and the next --out run writes (the renames of one swap hold the
    signal off together, so one of them stands for all three)."""
    strace = _strace()
    args = ["apply", "--arch", "sm120", "--source", SOURCE, "--out", "out"]
    for existing, spec in ((True, "rename:signal=INT:when=1"), (True, "mkdir:signal=INT:when=20"),
                           (False, "rename:signal=INT:when=1")):
        d = tmp_path / f"{existing}-{spec.replace(':', '-').replace('=', '')}"
        d.mkdir()
        if existing:
            shutil.copytree(out_first, d / "out")
        run = _cli(args, d, (strace, "-f", "--seccomp-bpf", "-qq", "-e", f"inject={spec}"))
        assert "Traceback" not in run.stderr, run.stderr
        if existing or spec.startswith("rename"):
            _out_state(d / "out", out_done)  # the old copy stays, or the swap ran to its end
        assert not [p for p in (d / "out").iterdir() if p.name.startswith(".sglang.")], spec
        nxt = _cli(args, d)
        assert nxt.returncode == 0, (spec, existing, nxt.stderr)
        _out_state(d / "out", out_done)
        shutil.rmtree(d)


# -- a full disk, a target that cannot be replaced ---------------------------------------------
@pytest.fixture
def tmpfs(tmp_path):
    mounted = []

    def mount(size: str) -> Path:
        d = tmp_path / f"tmpfs-{len(mounted)}"
        d.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True, text=True)
        if r.returncode != 0:
            if os.environ.get("FORGEPATCH_STRICT"):
                pytest.fail(f"cannot mount a tmpfs (root needed): {r.stderr.strip()}")
            pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
        mounted.append(d)
        return d

    yield mount
    for d in reversed(mounted):
        subprocess.run(["umount", "-l", str(d)], check=False)


def _fill(d: Path) -> None:
    fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 1024):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def test_init_on_a_full_disk_changes_nothing_and_says_why(tmpfs):
    small = tmpfs("16k")  # less than the staged copies need
    run = forgepatch("init", "--dir", small, env=ENV)
    assert_one_line_error(run, 2, str(small), "not enough free space", "nothing changed")
    assert "None" not in run.err and digest(small) == {}
    full = tmpfs("64k")
    _fill(full)
    before = digest(full)
    run = forgepatch("init", "--dir", full, env=ENV)
    assert_one_line_error(run, 2, str(full))
    assert "None" not in run.err and digest(full) == before  # no lock or state left behind


def test_apply_out_on_a_full_disk_leaves_no_staging(tmpfs):
    d = tmpfs("1m")  # the copy is tens of MB
    run = forgepatch("apply", "--arch", "sm120", "--source", SOURCE, "--out", d / "out", env=ENV)
    assert_one_line_error(run, 2, str(d / "out"), "No space left on device")
    assert "None" not in run.err
    assert sorted(p.name for p in (d / "out").iterdir()) == []


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A local copy of the 0.5.23 package and the files apply --in-place changes there."""
    from forgepatch.sources import pypi_tree

    root = tmp_path_factory.mktemp("tree")
    shutil.copytree(pypi_tree("0.5.23").package, root / "sglang")
    check = forgepatch("apply", "--arch", "sm120", "--source", root, "--check", "--json", env=ENV)
    changed = check.json()["changed_files"]
    assert len(changed) >= 2, changed
    return root, [root / "sglang" / (c["path"] if isinstance(c, dict) else c) for c in changed]


@pytest.mark.parametrize("how", ["chattr", "bind-mount"])
def test_a_target_that_cannot_be_replaced_changes_nothing(tree, how):
    root, changed = tree
    victim = changed[-1]
    before = digest(root)
    if how == "chattr":
        setup, undo = ["chattr", "+i", str(victim)], ["chattr", "-i", str(victim)]
        reason = "immutable"
    else:
        setup, undo = ["mount", "--bind", str(victim), str(victim)], ["umount", str(victim)]
        reason = "mount point"
    r = subprocess.run(setup, capture_output=True, text=True)
    if r.returncode != 0:
        if os.environ.get("FORGEPATCH_STRICT"):
            pytest.fail(f"{how} failed (root needed): {r.stderr.strip()}")
        pytest.skip(f"{how}: {r.stderr.strip()}")
    try:
        run = forgepatch("apply", "--arch", "sm120", "--source", root, "--in-place", env=ENV)
        assert_one_line_error(run, 2, str(victim), reason, "nothing changed")
        assert "None" not in run.err
        assert digest(root) == before  # not 2 of 3 files patched: none
    finally:
        subprocess.run(undo, check=True)
    ok = forgepatch("apply", "--arch", "sm120", "--source", root, "--in-place", env=ENV)
    assert ok.rc == 0, ok.err
    shutil.rmtree(root / "sglang")
    from forgepatch.sources import pypi_tree

    shutil.copytree(pypi_tree("0.5.23").package, root / "sglang")
