"""The ledger on its own: hash chain, atomic appends, the lock under concurrent writers, and
bad input for release/verify/status (unknown pin/arch, no ledger, corrupt ledger, bad results
file): one line, exit 2, ledger left byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.release_world import ROOT, cli

from forgepatch.errors import BadInput, Failure
from forgepatch.combination.ledger import LedgerEntry
from forgepatch.release.ledger import FORMAT, Ledger, chain_problem


def entry(n: int, pin: str = "p23", arch: str = "sm120") -> LedgerEntry:
    return LedgerEntry.model_validate(
        {"tag": f"forgepatch/{pin}/{arch}-{n}", "pin": pin, "arch": arch, "commit": f"{n:040x}",
         "patchset": "abc", "image": {"id": f"sha256:{n:064x}"}, "profiles": {"ok": {"status": "pass"}}})


def test_appends_form_a_hash_chain_that_shows_edits_removals_and_reordering(tmp_path):
    book = Ledger(tmp_path / "releases" / "ledger.json")
    with book.lock():
        stored = [book.append(entry(i)) for i in range(3)]
    entries = book.read()
    assert entries == stored and chain_problem(entries) is None
    assert entries[0].prev == "" and entries[1].prev == entries[0].digest
    assert json.loads(book.path.read_text())["format"] == FORMAT

    edited = [e.doc() for e in entries]
    edited[1]["image"]["id"] = "sha256:" + "f" * 64
    assert "entry 2 (forgepatch/p23/sm120-1): its content does not match its digest" in chain_problem(
        [LedgerEntry.stored(d) for d in edited])
    assert "entry 2" in chain_problem([entries[0], entries[2]])  # a removed entry
    assert "entry 1" in chain_problem([entries[1], entries[0], entries[2]])  # reordered

    book.path.write_text(json.dumps({"format": FORMAT, "releases": edited}))
    before = book.path.read_bytes()
    with book.lock(), pytest.raises(Failure, match="integrity check failed"):
        book.append(entry(9))
    assert book.path.read_bytes() == before


def test_a_failed_write_leaves_the_old_ledger_and_no_temp_file(tmp_path, monkeypatch):
    book = Ledger(tmp_path / "ledger.json")
    with book.lock():
        book.append(entry(1))
    before = book.path.read_bytes()

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with book.lock(), pytest.raises(OSError):
        book.append(entry(2))
    assert book.path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]  # the lock lives in the cache dir


def test_concurrent_writers_lose_no_entry(tmp_path):
    path = tmp_path / "ledger.json"
    code = ("import sys\nfrom forgepatch.combination.ledger import LedgerEntry\nfrom forgepatch.release.ledger import Ledger\nbook = Ledger(sys.argv[1])\n"
            "for i in range(5):\n    with book.lock():\n"
            "        book.append(LedgerEntry(tag=f't{sys.argv[2]}-{i}', pin='p', arch='a', commit='c'))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), str(n)], env=env) for n in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    entries = Ledger(path).read()
    assert len(entries) == 20 and chain_problem(entries) is None
    assert len({e.tag for e in entries}) == 20


@pytest.mark.parametrize("text, why", [
    ('{"format": "forgepatch-ledger/1", "releases": [', "corrupt ledger (line 1"),
    ("[]", "not a forgepatch ledger"),
    ('{"format": "forgepatch-ledger/1", "releases": [{"tag": 1}]}', "entry 1 lacks tag/pin/arch/commit"),
    (b"\xff\xfe", "not UTF-8"),
])
def test_unreadable_ledgers_are_bad_input(tmp_path, text, why):
    path = tmp_path / "ledger.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(BadInput, match="left as is") as exc:
        Ledger(path).read()
    assert why in str(exc.value) and "\n" not in str(exc.value)


# -- the CLI's bad input ------------------------------------------------------------------------
@pytest.fixture
def project(tmp_path):
    """matrix.toml + a valid ledger with one entry + a git repo; no Docker needed."""
    (tmp_path / "matrix.toml").write_text(
        'default_pin = "p23"\n[pins.p23]\npypi = "0.5.23"\n'
        '[arches.sm120]\npatches = ["sm120-flashinfer-allreduce-fusion"]\nprofiles = ["probe"]\n'
        '[profiles.probe]\ngpus = 1\n[release]\nledger = "releases/ledger.json"\n')
    book = Ledger(tmp_path / "releases" / "ledger.json")
    with book.lock():
        book.append(entry(1))
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    (tmp_path / "smoke-results.json").write_text('{"summary": {}, "jobs": []}')
    return tmp_path


def one_line_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def snapshot(root: Path) -> dict[str, bytes]:
    rel = root / "releases"
    return {p.name: p.read_bytes() for p in rel.iterdir()} if rel.exists() else {}


@pytest.mark.parametrize("args, needles", [
    (["release", "--pin", "nope", "--repo", "repo"], ["--pin: unknown pin 'nope'"]),
    (["release", "--arch", "sm103", "--repo", "repo"], ["--arch: 'sm103' is not configured"]),
    (["release", "--arch", "sm999", "--repo", "repo"], ["--arch: unknown arch 'sm999'"]),
    (["release", "--repo", "repo", "--results", "missing.json"], ["--results: cannot read missing.json"]),
    (["release", "--repo", "repo", "--results", "matrix.toml"], ["matrix.toml: not a smoke results file"]),
    (["release", "--repo", "nowhere"], ["--repo: nowhere is not a directory"]),
    (["release", "--repo", "releases"], ["--repo: releases is not a git repository"]),
    (["verify", "forgepatch/p23/sm999", "--repo", "repo"], ["unknown tag 'forgepatch/p23/sm999'"]),
])
def test_cli_bad_input_leaves_the_ledger(project, args, needles):
    before = snapshot(project)
    one_line_error(cli(*args, cwd=project), *needles)
    assert snapshot(project) == before


def test_no_results_file_is_bad_input(project):
    (project / "smoke-results.json").unlink()
    one_line_error(cli("release", "--repo", "repo", cwd=project), "--results: give the smoke results file(s)")


@pytest.mark.parametrize("command", [["verify", "forgepatch/p23/sm120", "--repo", "repo"]])
def test_no_ledger_is_bad_input(project, command):
    (project / "releases" / "ledger.json").unlink()
    one_line_error(cli(*command, cwd=project), "no release ledger")
    assert not (project / "releases" / "ledger.json").exists()


@pytest.mark.parametrize("extra", [[], ["--markdown"]])
def test_status_without_a_ledger_is_an_empty_state_unless_release_tags_exist(project, extra):
    """Before the first release `status` is an empty table, exit 0 (issue 26: an empty state
    is not bad input); with the fork repo given, a release tag the (missing) ledger lacks is
    tamper evidence: LEDGER CHAIN BROKEN, exit 1."""
    (project / "releases" / "ledger.json").unlink()
    empty = cli("status", *extra, cwd=project)
    assert empty.returncode == 0, empty.stderr
    assert "Traceback" not in empty.stderr
    tags = cli("status", *extra, "--repo", "repo", cwd=project)
    if subprocess.run(["git", "-C", str(project / "repo"), "tag", "-l", "forgepatch/*"], capture_output=True,
                      text=True).stdout.strip():
        assert tags.returncode == 1, (tags.stdout, tags.stderr)
        assert "LEDGER CHAIN BROKEN" in tags.stdout + tags.stderr
    assert not (project / "releases" / "ledger.json").exists()


@pytest.mark.parametrize("command", [["status"], ["verify", "forgepatch/p23/sm120-1", "--repo", "repo"],
                                     ["release", "--repo", "repo"], ["release", "--repo", "repo", "--dry-run"]])
def test_corrupt_ledger_is_bad_input_and_left_intact(project, command):
    path = project / "releases" / "ledger.json"
    path.write_bytes(path.read_bytes()[:-40])  # a torn write by some other tool
    before = snapshot(project)
    one_line_error(cli(*command, cwd=project), "corrupt ledger", "left as is")
    assert snapshot(project) == before


def test_status_reads_the_ledger_without_docker(project):
    r = cli("status", "--json", cwd=project)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["pins"] == ["p23"] and doc["arches"] == ["sm120"]
    assert doc["combinations"][0]["tag"] == "forgepatch/p23/sm120-1"
