"""`forgepatch verify TAG` after a real release: passes when everything agrees, and exits 1
naming the first mismatch for a tampered ledger (edited entry, or edited and re-hashed), a
moved fork branch, a rebuilt image, an edited results archive and a re-created tag."""

from __future__ import annotations

import json

import pytest

from support.release_world import BRANCH, TAG, World, git

pytestmark = pytest.mark.docker


@pytest.fixture
def released(world):
    """A world with one real release of sm120/p23."""
    w = world
    w.image = w.build()
    r = w.release(w.smoke())
    assert r.returncode == 0, r.stderr
    return w


def mismatch(w: World) -> str:
    r = w.verify("--json")
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and lines[0] == f"forgepatch: error: verify {TAG}: {doc['mismatch']['check']}: {doc['mismatch']['detail']}"
    return lines[0]


def rewrite_ledger(w: World, edit, rehash: bool) -> None:
    from forgepatch.release.ledger import entry_digest

    doc = json.loads(w.ledger.read_text())
    edit(doc["releases"][-1])
    if rehash:
        doc["releases"][-1]["digest"] = entry_digest(doc["releases"][-1])
    w.ledger.write_text(json.dumps(doc, indent=2))


def test_verify_passes_after_release(released):
    r = released.verify("--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["mismatch"] is None
    assert [c["check"] for c in doc["checks"]] == ["ledger", "tag", "chain", "branch", "image", "results"]
    assert doc["entry"]["image"]["id"] == released.image
    plain = released.verify()
    assert plain.returncode == 0 and plain.stdout.count("ok") >= 6


def test_verify_catches_a_tampered_ledger(released):
    w = released
    other = "sha256:" + "0" * 64
    rewrite_ledger(w, lambda e: e["image"].__setitem__("id", other), rehash=False)
    line = mismatch(w)
    assert "ledger:" in line and "entry 1 (forgepatch/p23/sm120): its content does not match its digest" in line

    # a careful forger re-hashes the entry: the tag message still tells the truth
    rewrite_ledger(w, lambda e: None, rehash=True)
    line = mismatch(w)
    assert "tag-message: ledger and tag message disagree on image" in line and w.image[:19] in line


def test_verify_catches_a_moved_branch(released):
    w = released
    head = git(w.repo, "rev-parse", BRANCH)
    tree = git(w.repo, "rev-parse", f"{head}^{{tree}}")
    moved = git(w.repo, "commit-tree", tree, "-p", head, "-m", "hotfix pushed after the release")
    git(w.repo, "update-ref", f"refs/heads/{BRANCH}", moved, head)
    line = mismatch(w)
    assert f"branch: fork branch {BRANCH} moved: it is at {moved[:12]}, the release tagged {head[:12]}" in line


def test_verify_catches_a_rebuilt_image(released):
    w = released
    rebuilt = w.rebuild()
    line = mismatch(w)
    assert "image: image rebuilt since release" in line
    assert f"{w.content_tag} now names {rebuilt[:19]}" in line and w.image[:19] in line


def test_verify_catches_edited_results_and_a_recreated_tag(released):
    w = released
    entry = json.loads(w.ledger.read_text())["releases"][-1]
    archive = w.ledger.parent / entry["results"][0]["archive"]
    original = archive.read_bytes()
    archive.write_bytes(original.replace(b'"status": "pass"', b'"status": "fail"', 1))
    assert "results: archived results" in mismatch(w) and "(edited)" in mismatch(w)
    archive.write_bytes(original)
    assert w.verify().returncode == 0

    message = git(w.repo, "tag", "-l", "--format=%(contents)", TAG)
    git(w.repo, "tag", "-d", TAG)
    git(w.repo, "-c", "user.name=Someone Else", "tag", "-a", "-m", message, TAG, entry["commit"])
    assert "tag re-created" in mismatch(w)
