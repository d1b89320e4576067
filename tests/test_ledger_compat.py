"""Ledgers and release tags written before the ledger entry was typed (issue 25) still
read: `status --repo` checks the whole chain against the tags, `verify` passes every check
up to the image (which is not in this engine or registry any more), the archived results
still prove every recorded profile, and the typed entry round-trips each entry byte for
byte (so its digest and its tag's `Forgepatch-Ledger-Entry` trailer are unchanged).

The documents are in tests/fixtures/ledger-v1 (see its README), made by a real release."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from support.release_world import BRANCH, TAG, cli, git

FIXTURES = Path(__file__).parent / "fixtures" / "ledger-v1"
KINDS = ["local", "registry"]


@pytest.fixture(params=KINDS)
def old_release(request, tmp_path, template_repo) -> Path:
    return project(request.param, tmp_path, template_repo)


def project(kind: str, tmp_path: Path, template_repo: Path) -> Path:
    """A project dir: the old ledger + archive + matrix, and a fork repo holding the old
    release tag and fork branch (fetched from the bundle over the real upstream commit)."""
    src = FIXTURES / kind
    root = tmp_path / kind
    shutil.copytree(src / "releases", root / "releases")
    shutil.copy(src / "matrix.toml", root / "matrix.toml")
    repo = root / "fork"
    shutil.copytree(template_repo / ".git", repo / ".git", symlinks=True)
    assert git(repo, "rev-parse", "v0.5.23^{commit}") == (src / "upstream").read_text().strip()
    for tag in git(repo, "tag", "-l", "forgepatch/*").splitlines():
        git(repo, "tag", "-d", tag)
    git(repo, "fetch", "-q", "--update-head-ok", str(src / "fork.bundle"),
        f"+refs/heads/{BRANCH}:refs/heads/{BRANCH}", f"+refs/tags/{TAG}:refs/tags/{TAG}")
    return root


def test_status_checks_the_old_chain_against_its_tags(old_release):
    r = cli("status", "--repo", "fork", "--json", cwd=old_release)
    assert r.returncode == 0, (r.stdout, r.stderr)
    doc = json.loads(r.stdout)
    (comb,) = doc["combinations"]
    entry = json.loads((old_release / "releases" / "ledger.json").read_text())["releases"][0]
    assert (comb["tag"], comb["pin"], comb["arch"], comb["commit"]) == (TAG, "p23", "sm120", entry["commit"])
    assert comb["profiles"] == ["gate", "ok"] and comb["image"] == entry["image"]["id"]
    assert doc["chain"]["ok"] is True and doc["chain"]["tags_checked"] == 1, doc["chain"]


def test_verify_accepts_the_old_tag_entry_and_chain(tmp_path, template_repo):
    """(The registry fixture's registry is gone: its verify stops there, exit 2.)"""
    r = cli("verify", TAG, "--repo", "fork", "--json", cwd=project("local", tmp_path, template_repo))
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    checks = [c for c in doc["checks"] if c["ok"]]
    assert [c["check"] for c in checks][:4] == ["ledger", "tag", "chain", "branch"], (doc, r.stderr)
    assert "message agrees with the ledger" in checks[1]["detail"]
    # the image was removed from this engine (and the registry is gone): only that may fail
    assert doc["ok"] or doc["mismatch"]["check"] in ("image", "registry"), doc["mismatch"]


def test_old_archived_results_still_prove_every_profile(old_release):
    from forgepatch.release.ledger import Ledger
    from forgepatch.release.verify import _check_results

    ledger = Ledger(old_release / "releases" / "ledger.json")
    (entry,) = ledger.read()
    seen = []
    _check_results(lambda name, ok, detail: seen.append((name, ok, detail)), ledger, entry)
    assert all(ok is not False for _, ok, _ in seen), seen
    assert seen[-1][2].startswith("2 profile(s) passed on sha256:"), seen


@pytest.mark.parametrize("kind", KINDS)
def test_the_typed_entry_writes_what_the_untyped_writer_wrote(kind, tmp_path, template_repo):
    """A fresh entry's document is the model's dump: on every entry main wrote, the dump of
    the parsed model holds every key with the same value (the registry-only ``registry_tags``
    key absent when not promoted); a key it adds is a field added since, unset (None). An
    entry read from the ledger is its stored document, so its digests stay those written."""
    from forgepatch.combination.ledger import LedgerEntry, content_digest
    from forgepatch.infra.gitrepo import parse_trailers

    (raw,) = json.loads((FIXTURES / kind / "releases" / "ledger.json").read_text())["releases"]
    stored = LedgerEntry.stored(raw)
    assert stored.doc() == raw and stored.entry_digest() == raw["digest"]
    fresh = LedgerEntry.model_validate(raw)
    assert _added(raw, fresh.doc()) <= {"profiles.gate.audit.jit", "profiles.ok.audit.jit", "audit.jit"}
    assert ("registry_tags" in fresh.doc()["image"]) == (kind == "registry")
    # the digest the release tag carries (read out of the bundle's tag object)
    message = git(project(kind, tmp_path, template_repo) / "fork", "cat-file", "tag", TAG)
    assert parse_trailers(message)["Forgepatch-Ledger-Entry"] == stored.content_digest() == content_digest(raw)


def _added(old, new, where: str = "") -> set[str]:
    """The keys ``new`` adds to ``old`` (each must be None); every key of ``old`` must be in
    ``new`` with the same value."""
    if not isinstance(old, dict):
        assert new == old, where
        return set()
    assert isinstance(new, dict) and set(old) <= set(new), (where, set(old) - set(new or {}))
    out = set()
    for key, value in new.items():
        path = f"{where}.{key}" if where else key
        if key in old:
            out |= _added(old[key], value, path)
        else:
            assert value is None, (path, value)
            out.add(path)
    return out
