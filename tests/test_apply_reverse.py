"""``apply --reverse``: an ``apply --in-place`` undone exactly (patching/undo.py), on real trees.

Real parts: the SGLang 0.5.23 wheel's tree (cached), the two-package fixture series (a text
patch on FlashInfer's CUDA launcher with CRLF line ends and a Latin-1 byte, an added Triton
config) over the flashinfer-python 0.6.1 wheel, the real CLI in a subprocess, ``git apply``
for the reverse diff and strace for the kills.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forgepatch.infra.journal import STATE_DIR
from forgepatch.sources import pypi_tree
from tests.support.cli import assert_one_line_error, forgepatch
from tests.support.killmatrix import _strace

ENV = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
FIXTURE = Path(__file__).parent / "fixtures" / "packages"


def tree_digest(root: Path) -> dict[str, str]:
    """Every file (sha256) and directory under ``root``, state directories included."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def orig(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reverse-orig")
    shutil.copytree(pypi_tree("0.5.23").package, root / "sglang")
    return root


def _copy(orig: Path, dest: Path) -> Path:
    shutil.copytree(orig, dest)
    return dest


@pytest.fixture(scope="module")
def applied(orig, tmp_path_factory) -> Path:
    """``orig`` patched --in-place once (copied with its record by ``_applied_copy``: one apply
    per module instead of one per case)."""
    tree = _copy(orig, tmp_path_factory.mktemp("reverse-applied") / "t")
    run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--in-place", env=ENV)
    assert run.rc == 0, run.err
    return tree


def _applied_copy(applied: Path, dest: Path) -> Path:
    """A copy of the applied tree and of the record its apply wrote (records are kept per tree
    path: the copy's is the same bytes under the copy's key)."""
    from forgepatch.patching.undo import records_dir

    _copy(applied, dest)
    for record in records_dir(applied / "sglang").glob("*.json"):
        shutil.copy(record, records_dir(dest / "sglang") / record.name)
    return dest


def test_reverse_after_in_place_gives_back_every_byte_and_says_what_it_did(orig, tmp_path):
    tree = _copy(orig, tmp_path / "t")
    want = tree_digest(tree)
    applied = forgepatch("apply", "--arch", "sm120", "--source", tree, "--in-place", env=ENV)
    assert applied.rc == 0, applied.err
    patched = tree_digest(tree)
    changed = sorted(k for k in want if want[k] != patched[k])
    assert len(changed) == 3 and set(patched) == set(want)
    # --check: exit 0, says what it would do, writes nothing
    check = forgepatch("apply", "--arch", "sm120", "--source", tree, "--reverse", "--check", "--json", env=ENV)
    assert check.rc == 0, check.err
    doc = check.json()
    assert doc["status"] == "would-reverse" and doc["trees"][0]["arch"] == "sm120"
    assert ["sglang/" + r for r in doc["trees"][0]["restored"]] == changed and doc["trees"][0]["removed"] == []
    assert tree_digest(tree) == patched
    # --diff: applies with git to a copy of the patched tree and gives the original bytes
    diff = forgepatch("apply", "--arch", "sm120", "--source", tree, "--reverse", "--diff", env=ENV)
    assert diff.rc == 0 and "3 file(s) to restore" in diff.err, diff.err
    work = _copy(tree, tmp_path / "work")
    (tmp_path / "r.patch").write_text(diff.out)
    subprocess.run(["git", "apply", "--unsafe-paths", "--directory=", str(tmp_path / "r.patch")], cwd=work,
                   check=True, capture_output=True)
    assert tree_digest(work) == want
    assert tree_digest(tree) == patched
    # the reverse itself
    rev = forgepatch("apply", "--arch", "sm120", "--source", tree, "--reverse", env=ENV)
    assert rev.rc == 0, rev.err
    assert "3 file(s) restored, 0 removed" in rev.out
    assert tree_digest(tree) == want  # every file and directory, no state left
    # nothing more to reverse: one line, exit 1, nothing touched
    again = forgepatch("apply", "--arch", "sm120", "--source", tree, "--reverse", env=ENV)
    assert_one_line_error(again, 1, "nothing to reverse", str(tree / "sglang"))
    assert tree_digest(tree) == want


def test_an_edited_file_refuses_the_whole_reverse_naming_it(applied, tmp_path):
    tree = _applied_copy(applied, tmp_path / "t")
    victim = tree / "sglang" / "srt" / "layers" / "flashinfer_comm_fusion.py"
    victim.write_bytes(victim.read_bytes() + b"# edited by hand\n")
    before = tree_digest(tree)
    for extra in ((), ("--check",), ("--diff",)):
        run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--reverse", *extra, env=ENV)
        assert_one_line_error(run, 1, str(victim), "changed since apply --in-place", "it was edited", "nothing changed")
    assert tree_digest(tree) == before  # no file restored, not even the unedited ones
    victim.unlink()
    gone = forgepatch("apply", "--arch", "sm120", "--source", tree, "--reverse", env=ENV)
    assert_one_line_error(gone, 1, str(victim), "it was removed")


def test_reverse_is_refused_for_another_arch_a_pin_and_write_flags(applied, tmp_path):
    tree = _applied_copy(applied, tmp_path / "t")
    other = forgepatch("apply", "--arch", "sm103", "--source", tree, "--reverse", env=ENV)
    assert_one_line_error(other, 2, "--arch sm103", "was --arch sm120")
    for args, needle in ((["--source", "pypi:0.5.23"], "not a local directory"), ([], "needs --source DIR"),
                         (["--source", str(tree), "--in-place"], "--in-place does not apply"),
                         (["--source", str(tree), "--check", "--diff"], "not both")):
        run = forgepatch("apply", "--arch", "sm120", "--reverse", *args, env=ENV)
        assert_one_line_error(run, 2, needle)


def test_two_applies_pop_in_order(orig, tmp_path):
    """A stack, as quilt's: sm103 over sm120 is undone first, then sm120."""
    tree = _copy(orig, tmp_path / "t")
    want = tree_digest(tree)
    assert forgepatch("apply", "--arch", "sm120", "--source", tree, "--in-place", env=ENV).rc == 0
    mid = tree_digest(tree)
    second = forgepatch("apply", "--arch", "sm103", "--source", tree, "--in-place", env=ENV)
    if second.rc != 0 or tree_digest(tree) == mid:
        pytest.fail(f"sm103 changed nothing over sm120 on 0.5.23: {second.err[-300:]}")
    assert forgepatch("apply", "--arch", "sm103", "--source", tree, "--reverse", env=ENV).rc == 0
    assert tree_digest(tree) == mid
    assert forgepatch("apply", "--arch", "sm120", "--source", tree, "--reverse", env=ENV).rc == 0
    assert tree_digest(tree) == want


# -- a series with a text patch (CRLF, Latin-1) and an added file, over two packages ------------
def test_text_patch_and_added_file_over_two_packages_reverse_byte_exact(orig, tmp_path):
    from tests.test_packages import CONFIG, CONFIG_DIR, CU, small_flashinfer

    project = _copy(FIXTURE, tmp_path / "proj")
    toml = project / "patches" / "moe-configs-rtx-pro-6000.toml"  # (the .py tree lacks the configs/ dirs:
    toml.write_text(toml.read_text() + "create = true\n")  # the apply makes them, the reverse removes them)
    sg = _copy(orig, tmp_path / "sg")
    fip = small_flashinfer(tmp_path / "fi", crlf_junk=True)
    want_sg, want_fi = tree_digest(sg), tree_digest(fip.parent)
    assert not (sg / "sglang" / CONFIG_DIR).parent.exists()  # configs/ and triton_3_6_0/ are made
    srcs = ["--source", sg, "--source", fip.parent]
    run = forgepatch("apply", "--arch", "sm120", *srcs, "--in-place", cwd=project, env=ENV)
    assert run.rc == 0, run.err
    assert (sg / "sglang" / CONFIG_DIR / CONFIG).is_file() and b"major == 12" in (fip / CU).read_bytes()
    check = forgepatch("apply", "--arch", "sm120", *srcs, "--reverse", "--check", "--json", cwd=project, env=ENV)
    assert check.rc == 0, check.err
    trees = {Path(t["tree"]).name: t for t in check.json()["trees"]}
    assert trees["sglang"]["removed"] == [f"{CONFIG_DIR}/{CONFIG}"] and CU in trees["flashinfer"]["restored"]
    rev = forgepatch("apply", "--arch", "sm120", *srcs, "--reverse", cwd=project, env=ENV)
    assert rev.rc == 0, rev.err
    assert tree_digest(sg) == want_sg and tree_digest(fip.parent) == want_fi  # CRLF and \xe9 back byte for byte


# -- crash safety (the kill harness of test_crash_safety) ---------------------------------------
def _traced(strace: str, tree: Path, spec: str, *args: str, log: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [strace, "-f", "--seccomp-bpf", "-qq", "-e", spec] + (["-o", str(log)] if log else [])
    cmd += [sys.executable, "-m", "forgepatch", "apply", "--arch", "sm120", "--source", str(tree), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)


def test_reverse_killed_at_every_rename_ends_patched_or_original(orig, applied, tmp_path):
    strace = _strace()
    want, patched = tree_digest(orig), tree_digest(applied)
    count = _applied_copy(applied, tmp_path / "count")
    log = tmp_path / "renames.log"
    assert _traced(strace, count, "trace=rename", "--reverse", log=log).returncode == 0
    assert tree_digest(count) == want
    n = sum(1 for line in log.read_text().splitlines() if "rename(" in line)
    assert n == 4  # the journal's commit, then one per restored file
    states = []
    for i in range(1, n + 1):
        tree = _applied_copy(applied, tmp_path / f"kill-{i}")
        proc = _traced(strace, tree, f"inject=rename:signal=KILL:when={i}", "--reverse")
        assert proc.returncode != 0 and "reversed" not in proc.stdout
        now = tree_digest(tree)  # (the journal is still there: compare the package's files only)
        files = {k: v for k, v in now.items() if STATE_DIR not in k}
        # the next command finishes or undoes the write first (one line), never leaves a mix:
        # rolled back, the tree is the patched one and --reverse then reverses it; completed,
        # the tree is the original and the record is dropped (nothing left to reverse)
        again = forgepatch("apply", "--arch", "sm120", "--source", tree, "--reverse", env=ENV)
        notes = [ln for ln in again.err.splitlines() if "interrupted" in ln]
        assert len(notes) == 1 and "Traceback" not in again.err, again.err
        if "completed an interrupted apply --reverse" in notes[0]:
            states.append("original")
            # (killed between renames: each file holds its patched or its original bytes)
            assert set(files) == set(want) and all(files[k] in (want[k], patched[k]) for k in files)
            assert again.rc == 1 and "nothing to reverse" in again.err, again.err
        else:
            states.append("patched")
            assert "rolled back" in notes[0] and files == patched
            assert again.rc == 0 and "3 file(s) restored" in again.out, again.err
        assert tree_digest(tree) == want  # every file, no state directory left
        shutil.rmtree(tree)
    # killed at the journal's rename: nothing reversed; at a file's rename: rolled forward
    assert states == ["patched"] + ["original"] * (n - 1)


def test_an_apply_killed_before_its_journal_committed_leaves_nothing_to_reverse(orig, tmp_path):
    """Its record was written first (it holds the tree's contents before): read as not applied."""
    strace = _strace()
    tree = _copy(orig, tmp_path / "t")
    want = tree_digest(tree)
    proc = _traced(strace, tree, "inject=rename:signal=KILL:when=1", "--in-place")  # the journal's commit
    assert proc.returncode != 0
    run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--reverse", env=ENV)
    lines = [ln for ln in run.err.splitlines() if ln.strip()]
    assert run.rc == 1 and len(lines) == 2 and "Traceback" not in run.err, run.err
    assert "rolled back an interrupted" in lines[0] and "nothing to reverse" in lines[1]
    assert tree_digest(tree) == want
    # and killed at its first file's rename: rolled forward by the next command, then reversible
    tree2 = _copy(orig, tmp_path / "t2")
    assert _traced(strace, tree2, "inject=rename:signal=KILL:when=2", "--in-place").returncode != 0
    rev = forgepatch("apply", "--arch", "sm120", "--source", tree2, "--reverse", env=ENV)
    assert rev.rc == 0 and "completed an interrupted apply --in-place" in rev.err, rev.err
    assert tree_digest(tree2) == want


def test_a_damaged_record_is_one_line_naming_it(applied, tmp_path):
    from forgepatch.patching.undo import records_dir

    tree = _applied_copy(applied, tmp_path / "t")
    record = sorted(records_dir(tree / "sglang").glob("*.json"))[-1]
    doc = json.loads(record.read_text())
    doc["files"][0]["content"] = doc["files"][1]["content"]  # the saved bytes of another file
    record.write_text(json.dumps(doc))
    before = tree_digest(tree)
    run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--reverse", env=ENV)
    assert_one_line_error(run, 2, str(record), "does not match its sha256")
    assert tree_digest(tree) == before
