"""Crash-safe ``apply --in-place`` (forgepatch.infra.journal), on real release trees.

Fault injection: strace kills the run at its Nth ``rename``, for every N the run makes (and at
``fsync`` calls while it stages and after its renames); after each kill the next command (a read-only ``apply --check``)
completes or undoes the write and says so in one line, and the tree equals either the
original or the fully patched one with no journal or temp file left. Concurrency: parallel
``apply --in-place`` runs on one tree serialise on the tree's lock and none misreports.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from forgepatch.infra.journal import STATE_DIR, TreeLock
from forgepatch.sources import pypi_tree
from tests.support.cli import assert_one_line_error, forgepatch
from tests.support.killmatrix import _strace

RELEASES = ["0.5.10", "0.5.23"]
ENV = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # no .pyc renames of our own


def digest(root: Path) -> dict[str, str]:
    """Every file and directory under root (temp files and state dirs included)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


@dataclass
class Release:
    version: str
    orig: Path
    want_orig: dict[str, str]
    want_patched: dict[str, str]

    @property
    def changed(self) -> int:
        return sum(self.want_orig[k] != self.want_patched[k] for k in self.want_orig)


_built: dict[str, Release] = {}


def _release(version: str, tmp_path_factory) -> Release:
    """A pristine tree dir of ``version``, its digest and the fully patched one's (once per module)."""
    if version in _built:
        return _built[version]
    root = tmp_path_factory.mktemp(f"crash-{version}")
    orig = root / "orig"
    shutil.copytree(pypi_tree(version).package, orig / "sglang")
    patched = root / "patched"
    shutil.copytree(orig, patched)
    run = forgepatch("apply", "--arch", "sm120", "--source", patched, "--in-place", env=ENV)
    assert run.rc == 0, run.err
    want_orig, want_patched = digest(orig), digest(patched)
    assert want_orig != want_patched and set(want_orig) == set(want_patched)  # no debris
    _built[version] = Release(version, orig, want_orig, want_patched)
    return _built[version]


@pytest.fixture(scope="module", params=RELEASES)
def release(request, tmp_path_factory) -> Release:
    """Each release of RELEASES: the kills at every rename run on all of them."""
    return _release(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def latest(tmp_path_factory) -> Release:
    """The newest release alone: for cases whose code path does not depend on the release."""
    return _release(RELEASES[-1], tmp_path_factory)


def _traced(strace: str, tree: Path, spec: str, log: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [strace, "-f", "--seccomp-bpf", "-qq", "-e", spec]
    if log is not None:
        cmd += ["-o", str(log)]
    cmd += [sys.executable, "-m", "forgepatch", "apply", "--arch", "sm120", "--source", str(tree), "--in-place"]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)


def _calls(strace: str, release, tmp_path: Path, syscall: str) -> int:
    orig, want_patched = release.orig, release.want_patched
    tree = tmp_path / "count"
    shutil.copytree(orig, tree)
    log = tmp_path / "calls.log"
    proc = _traced(strace, tree, f"trace={syscall}", log)
    assert proc.returncode == 0, proc.stderr
    assert digest(tree) == want_patched
    return sum(1 for line in log.read_text().splitlines() if re.search(rf"\b{syscall}\(", line))


def _kill_and_recover(strace: str, release, tmp_path: Path, syscall: str, n: int, rerun: bool = True) -> str:
    """Kill the run at its nth ``syscall``, run the next command; returns which state the
    tree is in ("original" | "patched")."""
    orig, want_orig, want_patched = release.orig, release.want_orig, release.want_patched
    tree = tmp_path / f"{syscall}-{n}"
    shutil.copytree(orig, tree)
    proc = _traced(strace, tree, f"inject={syscall}:signal=KILL:when={n}")
    assert proc.returncode != 0, f"{syscall} #{n} was not reached: {proc.stderr[-400:]}"
    assert "wrote" not in proc.stdout
    # the next command (read-only) finishes or undoes the write first, in one line
    nxt = forgepatch("apply", "--arch", "sm120", "--source", tree, "--check", env=ENV)
    notes = [ln for ln in nxt.err.splitlines() if ln.strip()]
    now = digest(tree)
    assert not [p for p in now if STATE_DIR in p or p.endswith((".tmp", ".forgepatch"))], now
    if now == want_orig:
        state = "original"
        assert nxt.rc == 1 and f"would change {release.changed} file(s)" in nxt.out, nxt.out + nxt.err
    else:
        assert now == want_patched, f"half-patched tree after {syscall} #{n}"
        state = "patched"
        assert nxt.rc == 0 and "already patched" in nxt.out, nxt.out + nxt.err
    assert len(notes) <= 1 and "Traceback" not in nxt.err, nxt.err
    if notes:
        assert ("completed an interrupted apply --in-place" in notes[0]) == (state == "patched"), notes
        assert ("rolled back" in notes[0]) == (state == "original"), notes
    if not rerun:
        return state
    # and a plain rerun ends fully patched
    again = forgepatch("apply", "--arch", "sm120", "--source", tree, "--in-place", env=ENV)
    assert again.rc == 0 and digest(tree) == want_patched, again.err
    shutil.rmtree(tree)
    return state


def test_kill_at_every_rename(release, tmp_path):
    strace = _strace()
    n = _calls(strace, release, tmp_path, "rename")
    assert n == 1 + release.changed  # the journal's commit, then one per changed file
    states = [_kill_and_recover(strace, release, tmp_path, "rename", i) for i in range(1, n + 1)]
    # killed at the journal's rename: nothing was committed; at a file's rename: rolled forward
    assert states == ["original"] + ["patched"] * (n - 1)


def test_kill_at_fsyncs_while_staging_and_after_the_renames(latest, tmp_path):
    release = latest
    strace = _strace()
    n = _calls(strace, release, tmp_path, "fsync")
    assert n >= 2 * release.changed + 3  # staged copies, journal, directories
    # the first two: staging half done (no journal yet); the last two: renames done, the
    # journal not yet removed
    states = [_kill_and_recover(strace, release, tmp_path, "fsync", i, rerun=False) for i in (1, 2, n - 1, n)]
    assert states == ["original", "original", "patched", "patched"]


def test_concurrent_in_place_runs_serialise_and_report_truly(release, tmp_path):
    orig, want_patched = release.orig, release.want_patched
    tree = tmp_path / "tree"
    shutil.copytree(orig, tree)
    modes = ["--in-place", "--check", "--in-place", "--check", "--in-place", "--in-place"]
    with ThreadPoolExecutor(len(modes)) as pool:
        runs = list(pool.map(lambda mode: forgepatch("apply", "--arch", "sm120", "--source", tree, mode,
                                                     "--json", env=ENV), modes))
    # readers (--check, shared lock) see the original or the patched tree, never a mix
    for mode, r in zip(modes, runs):
        if mode == "--check":
            doc = r.json()
            assert (r.rc, len(doc["changed_files"])) in ((1, release.changed), (0, 0)), (r.rc, doc["changed_files"])
    runs = [r for mode, r in zip(modes, runs) if mode == "--in-place"]
    assert all(r.rc == 0 for r in runs), [r.err for r in runs]
    docs = [r.json() for r in runs]
    writers = [d for d in docs if d["changed_files"]]
    assert len(writers) == 1 and len(writers[0]["changed_files"]) == release.changed
    for d in docs:
        statuses = {s["status"] for p in d["patches"] for s in p["sites"]}
        if d is writers[0]:
            assert "applied" in statuses and "already-applied" not in statuses, statuses
        else:  # ran after the writer, under the lock: every site already patched, none half
            assert "applied" not in statuses and "already-applied" in statuses, statuses
            assert d["status"] == "unchanged"
    assert digest(tree) == want_patched


def test_a_held_lock_fails_after_the_timeout_with_one_line(latest, tmp_path):
    release = latest
    orig, want_orig = release.orig, release.want_orig
    tree = tmp_path / "tree"
    shutil.copytree(orig, tree)
    lock = TreeLock(tree / "sglang", "a test holding it")
    lock.acquire(exclusive=True, timeout=0)
    try:
        env = {**ENV, "FORGEPATCH_LOCK_TIMEOUT": "0.3"}
        run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--in-place", env=env)
        assert_one_line_error(run, 1, f"pid {os.getpid()} (a test holding it)", "FORGEPATCH_LOCK_TIMEOUT")
        check = forgepatch("apply", "--arch", "sm120", "--source", tree, "--check", env=env)
        assert_one_line_error(check, 1, f"pid {os.getpid()}")
        bad = forgepatch("apply", "--arch", "sm120", "--source", tree, "--in-place",
                         env={**ENV, "FORGEPATCH_LOCK_TIMEOUT": "soon"})
        assert_one_line_error(bad, 2, "FORGEPATCH_LOCK_TIMEOUT")
    finally:
        lock.release()
    assert digest(tree) == want_orig  # nothing written, the lock's state dir gone with its holder


def test_a_tree_edited_after_a_crash_is_not_overwritten(latest, tmp_path):
    """The journal completes only files still holding their old (or new) content."""
    release = latest
    strace = _strace()
    orig = release.orig
    tree = tmp_path / "tree"
    shutil.copytree(orig, tree)
    proc = _traced(strace, tree, "inject=rename:signal=KILL:when=3")  # journal + 1 file renamed
    assert proc.returncode != 0
    journal = tree / "sglang" / STATE_DIR / "journal.json"
    assert journal.is_file()
    entries = json.loads(journal.read_text())["files"]
    victim = tree / "sglang" / entries[-1]["path"]  # not renamed yet: the user edits it
    victim.write_text(victim.read_text() + "\n# edited by hand\n")
    run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--check", env=ENV)
    assert_one_line_error(run, 2, str(victim), "changed since an interrupted apply --in-place", "remove")
    assert journal.is_file() and victim.read_text().endswith("# edited by hand\n")


def test_kill_at_every_rename_of_apply_out(latest, tmp_path):
    """`apply --out DIR` swaps the copy and its record in together: killed at each rename,
    the next `--out` run finishes or undoes it (one line) and is not refused."""
    release = latest
    strace = _strace()
    first = tmp_path / "first"
    ok = forgepatch("apply", "--arch", "sm120", "--source", release.orig, "--out", first, env=ENV)
    assert ok.rc == 0, ok.err
    want = digest(first)

    def out_run(dest, *prefix):
        return subprocess.run([*prefix, sys.executable, "-m", "forgepatch", "apply", "--arch", "sm120", "--source",
                               str(release.orig), "--out", str(dest)], capture_output=True, text=True, env=ENV,
                              timeout=300)

    for existing in (False, True):  # a new DIR, and a DIR holding an earlier output
        log = tmp_path / "renames.log"
        dest = tmp_path / f"count-{existing}"
        if existing:
            shutil.copytree(first, dest)
        assert out_run(dest, strace, "-f", "--seccomp-bpf", "-qq", "-o", str(log), "-e", "trace=rename").returncode == 0
        n = sum(1 for line in log.read_text().splitlines() if "rename(" in line)
        assert n == (3 if existing else 2)  # (old copy away), new copy in, record in
        for i in range(1, n + 1):
            dest = tmp_path / f"kill-{existing}-{i}"
            if existing:
                shutil.copytree(first, dest)
            proc = out_run(dest, strace, "-f", "--seccomp-bpf", "-qq", "-e", f"inject=rename:signal=KILL:when={i}")
            assert proc.returncode != 0
            nxt = out_run(dest)
            assert nxt.returncode == 0, nxt.stderr
            notes = [ln for ln in nxt.stderr.splitlines() if "interrupted apply --out" in ln]
            assert len(notes) == 1, nxt.stderr
            got = digest(dest)
            record = json.loads((dest / ".forgepatch-out").read_text())["files"]
            got.pop(".forgepatch-out")
            # the complete copy, no staging left, and a record of exactly its files
            assert got == {k: v for k, v in want.items() if k != ".forgepatch-out"}, i
            assert {f"sglang/{rel}" for rel in record} == {k for k, v in got.items() if v != "dir"}


def test_an_unreadable_journal_stops_with_one_line_and_touches_nothing(latest, tmp_path):
    release = latest
    tree = tmp_path / "tree"
    shutil.copytree(release.orig, tree)
    state = tree / "sglang" / STATE_DIR
    state.mkdir()
    (state / "journal.json").write_text('{"format": "forgepatch-journal/1", "files": [{"path": "../../etc/x"')
    for args in (["--in-place"], ["--check"]):
        run = forgepatch("apply", "--arch", "sm120", "--source", tree, *args, env=ENV)
        assert_one_line_error(run, 2, str(state / "journal.json"), "unreadable journal")
    (state / "journal.json").write_text(json.dumps({"format": "forgepatch-journal/1", "what": "x", "pid": 1, "files": [
        {"path": "../outside.py", "old": None, "new": "0" * 64, "staged": "staged/0", "mode": 420}]}))
    run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--check", env=ENV)
    assert_one_line_error(run, 2, "leaves the tree")
    assert not (tree / "outside.py").exists()
    shutil.rmtree(state)
    assert digest(tree) == release.want_orig


def test_files_on_two_file_systems_are_written_together(tmp_path):
    """Reports on two mounts (a tmpfs and the disk): staged on one, moved across."""
    from forgepatch.infra.journal import write_together

    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the temp dir")
    other = Path(tempfile.mkdtemp(dir=shm))
    try:
        a, b = tmp_path / "r" / "a.json", other / "b.md"
        write_together({a: "{}\n", b: "# table\n"}, "smoke reports")
        assert a.read_text() == "{}\n" and b.read_text() == "# table\n"
        common = Path(os.path.commonpath([str(a.parent), str(b.parent)]))
        assert not (common / STATE_DIR).exists()
        assert sorted(p.name for p in other.iterdir()) == ["b.md"]
    finally:
        shutil.rmtree(other)
