"""Tamper-evident releases (issue 16 item 5), on real releases (real fork repo, images built
by `forgepatch build`, results from `forgepatch smoke`): each release tag carries the digest
of its ledger entry and the chain head, so a ledger edited *and re-hashed* (released_at,
repo), a removed last entry, a re-created tag and a bad signature all fail `verify` and
`status` (exit 1, one line); signed tags (ssh, made with ssh-keygen here) verify."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from support.release_world import TAG, World, git

pytestmark = pytest.mark.docker

TAG2 = TAG.replace("forgepatch/", "forgepatch-v2/", 1)


def _rehash(w: World, edit) -> None:
    """Edit the ledger the way a careful forger would: change entries, then recompute every
    digest and prev so the hash chain is intact again."""
    from forgepatch.release.ledger import entry_digest

    doc = json.loads(w.ledger.read_text())
    edit(doc["releases"])
    prev = ""
    for entry in doc["releases"]:
        entry["prev"] = prev
        entry["digest"] = prev = entry_digest(entry)
    w.ledger.write_text(json.dumps(doc, indent=2))


def _failed(r: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _status(w: World, *args: str) -> subprocess.CompletedProcess:
    return w.run("status", "--repo", w.repo, *args)


def _two_releases(w: World) -> None:
    """Two ledger entries of the same combination under two tag names (the second with
    tag_template forgepatch-v2/...): the chain has a head and an entry before it."""
    w.image = w.build()
    results = w.smoke()
    assert w.release(results).returncode == 0
    w.config.write_text(w.config.read_text().replace('tag_template = "forgepatch/{pin}/{arch}"',
                                                     'tag_template = "forgepatch-v2/{pin}/{arch}"'))
    r = w.release(results, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["combinations"][0]["status"] == "released"
    assert [e["tag"] for e in json.loads(w.ledger.read_text())["releases"]] == [TAG, TAG2]
    assert w.tags() == [TAG] and git(w.repo, "tag", "-l", "forgepatch-v2/*").split() == [TAG2]


def test_tags_carry_the_entry_digest_and_chain_head(world):
    from forgepatch.combination import LEDGER_GENESIS, Trailer
    from forgepatch.release.integrity import content_digest

    w = world
    _two_releases(w)
    first, second = json.loads(w.ledger.read_text())["releases"]
    for entry, prev in ((first, LEDGER_GENESIS), (second, first["digest"])):
        message = git(w.repo, "tag", "-l", "--format=%(contents)", entry["tag"])
        assert f"{Trailer.LEDGER_ENTRY}: {content_digest(entry)}" in message
        assert f"{Trailer.LEDGER_PREV}: {prev}" in message
        assert f"{Trailer.RELEASED_AT}: {entry['released_at']}" in message
    assert w.verify().returncode == 0
    r = _status(w, "--json")
    assert r.returncode == 0, r.stderr
    chain = json.loads(r.stdout)["chain"]
    assert chain["ok"] is True and chain["tags_checked"] == 2


def test_each_ledger_tamper_case_fails_verify_and_status(world):
    w = world
    _two_releases(w)
    original = w.ledger.read_bytes()

    def restore() -> None:
        w.ledger.write_bytes(original)
        assert w.verify().returncode == 0 and _status(w).returncode == 0

    # 1. released_at edited, digests recomputed: the tag recorded the entry's digest
    _rehash(w, lambda es: es[0].__setitem__("released_at", "2020-01-01T00:00:00.000000Z"))
    line = _failed(w.verify(), "entry 1 (forgepatch/p23/sm120): the entry differs from the one its tag recorded",
                   "released_at: ledger 2020-01-01T00:00:00.000000Z")
    _failed(_status(w), "ledger chain broken", "entry 1")
    doc = json.loads(_status(w, "--json").stdout)
    assert doc["chain"]["ok"] is False and "entry 1" in doc["chain"]["problem"]
    assert "LEDGER CHAIN BROKEN" in _status(w).stdout and "LEDGER CHAIN BROKEN" in _status(w, "--markdown").stdout
    assert "tag-message" in line
    restore()

    # 2. repo edited (newest entry), digests recomputed
    _rehash(w, lambda es: es[1].__setitem__("repo", "/elsewhere/fork"))
    _failed(w.verify(), "chain:", f"entry 2 ({TAG2}): the entry differs", "edited after release")
    _failed(_status(w), "entry 2")
    restore()

    # 3. the last entry deleted (chain still intact): its tag follows the ledger's head
    _rehash(w, lambda es: es.pop())
    _failed(w.verify(), "chain:", f"release tag {TAG2} follows the ledger's last entry", "the last entry was removed")
    _failed(_status(w), "the last entry was removed")
    restore()

    # 4. an entry edited without re-hashing: the hash chain itself
    doc = json.loads(original)
    doc["releases"][0]["arch"] = "sm121"
    w.ledger.write_text(json.dumps(doc))
    _failed(w.verify(), "ledger:", "its content does not match its digest")
    _failed(_status(w), "its content does not match its digest")
    restore()

    # 5. entries swapped and re-chained: each tag's chain position disagrees
    _rehash(w, lambda es: es.reverse())
    _failed(_status(w), "ledger chain broken", "in the chain")
    restore()

    # 6. a release tag re-created (same message, new tag object), the ledger untouched
    entry = json.loads(original)["releases"][1]
    message = git(w.repo, "tag", "-l", "--format=%(contents)", TAG2)
    git(w.repo, "tag", "-d", TAG2)
    git(w.repo, "-c", "user.name=Someone Else", "-c", "user.email=x@example.com", "tag", "-a",
        "--cleanup=verbatim", "-m", message, TAG2, entry["commit"])
    _failed(w.verify(), "chain:", "entry 2", "tag re-created")
    _failed(_status(w), "tag re-created")


def _ssh_signing(w: World, tmp) -> tuple[str, str]:
    """Configure the fork repo to sign tags with a fresh ssh key (gpg.format=ssh) and to
    verify them against an allowed-signers file; returns (allowed signers path, line)."""
    if not shutil.which("ssh-keygen"):
        pytest.fail("ssh-keygen missing: tests/run.sh installs openssh-client")
    key = tmp / "release_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "release", "-f", str(key)], check=True)
    allowed = tmp / "allowed_signers"
    line = f"release@example.com {key.with_suffix('.pub').read_text().strip()}\n"
    allowed.write_text(line)
    for k, v in (("user.name", "Release Bot"), ("user.email", "release@example.com"), ("gpg.format", "ssh"),
                 ("user.signingkey", str(key.with_suffix(".pub"))), ("gpg.ssh.allowedSignersFile", str(allowed))):
        git(w.repo, "config", k, v)
    return str(allowed), line


def test_signed_tags_are_verified(world, tmp_path):
    w = world
    allowed, line = _ssh_signing(w, tmp_path)
    _two_releases(w)
    for tag in (TAG, TAG2):
        assert "-----BEGIN SSH SIGNATURE-----" in git(w.repo, "cat-file", "tag", tag)
    r = w.verify("--json")
    assert r.returncode == 0, r.stderr
    tag_check = next(c for c in json.loads(r.stdout)["checks"] if c["check"] == "tag")
    assert "ssh signature verified" in tag_check["detail"]
    assert "2 signed tag(s) verified" in json.loads(r.stdout)["checks"][2]["detail"]

    # a signer that is not allowed: the signature no longer verifies
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with open(allowed, "w") as fh:
        fh.write(f"release@example.com {other.with_suffix('.pub').read_text().strip()}\n")
    _failed(w.verify(), "signature", "does not verify")
    _failed(_status(w), "signature does not verify")
    with open(allowed, "w") as fh:
        fh.write(line)
    assert w.verify().returncode == 0

    # a forger re-creates the newest tag unsigned with an edited entry and re-hashes the
    # ledger to match (tag object included): the downgrade from signed tags shows
    from forgepatch.combination import Trailer
    from forgepatch.release.integrity import content_digest

    def forge(entries):
        entries[1]["released_at"] = "2020-01-01T00:00:00.000000Z"
        body = git(w.repo, "tag", "-l", "--format=%(contents)", TAG2).split("-----BEGIN SSH SIGNATURE-----")[0]
        lines = [ln for ln in body.splitlines()]
        entries[1]["prev"] = entries[0]["digest"]
        lines = [f"{Trailer.LEDGER_ENTRY}: {content_digest(entries[1])}" if ln.startswith(Trailer.LEDGER_ENTRY) else
                 f"{Trailer.RELEASED_AT}: {entries[1]['released_at']}" if ln.startswith(Trailer.RELEASED_AT) else ln
                 for ln in lines]
        git(w.repo, "tag", "-d", TAG2)
        git(w.repo, "-c", "tag.gpgSign=false", "tag", "-a", "--cleanup=verbatim", "-m", "\n".join(lines) + "\n",
            TAG2, entries[1]["commit"])
        entries[1]["tag_object"] = git(w.repo, "rev-parse", f"refs/tags/{TAG2}")

    _rehash(w, forge)
    _failed(w.verify(), "entry 2", "unsigned")


# -- every release tag, its target and its signature (issue 28 item 5, issue 26 item 2) ---------
def _retag_at_new_code(w: World, tag: str) -> None:
    """Re-point ``tag`` at a new commit, its message (trailers) kept, and update the ledger's
    tag_object to the new tag object, re-hashed: what a careful forger does."""
    from support.release_world import BRANCH

    message = git(w.repo, "tag", "-l", "--format=%(contents)", tag)
    tree = git(w.repo, "rev-parse", f"refs/heads/{BRANCH}^{{tree}}").strip()
    evil = git(w.repo, "commit-tree", tree, "-p", f"refs/heads/{BRANCH}", "-m", "evil").strip()
    msg = w.root / "msg.txt"
    msg.write_text(message)
    git(w.repo, "tag", "-f", "-a", tag, "-F", msg, evil)
    new_object = git(w.repo, "rev-parse", f"refs/tags/{tag}").strip()

    def edit(entries):
        for entry in entries:
            if entry["tag"] == tag:
                entry["tag_object"] = new_object
    _rehash(w, edit)


def test_every_tag_is_checked_for_its_target_signing_and_form(world):
    """One release world, one tampering at a time (each undone before the next): a tag
    re-pointed (with the ledger re-hashed to match its new object) fails `status` and `verify`
    of ANOTHER tag; a repository set to sign tags, or require_signed_tags, refuses unsigned
    release tags; a tag of tag_template's form the ledger lacks is a break."""
    w = world
    _two_releases(w)
    ledger = w.ledger.read_text()
    refs = {t: git(w.repo, "rev-parse", f"refs/tags/{t}").strip() for t in (TAG, TAG2)}

    def restore():
        w.ledger.write_text(ledger)
        for t, obj in refs.items():
            git(w.repo, "update-ref", f"refs/tags/{t}", obj)
        assert _status(w).returncode == 0

    restore()
    _retag_at_new_code(w, TAG2)  # the head: re-hashing leaves the earlier entries' digests alone
    _failed(_status(w), "ledger chain broken", TAG2, "tag re-pointed")
    r = w.verify()  # of the OTHER tag
    assert r.returncode == 1 and "re-pointed" in r.stdout + r.stderr, (r.stdout, r.stderr)
    restore()

    git(w.repo, "config", "tag.gpgSign", "true")
    git(w.repo, "config", "user.signingkey", str(w.root / "no-such-key"))
    _failed(_status(w), "ledger chain broken", "unsigned", "this repository signs tags")
    git(w.repo, "config", "--unset", "tag.gpgSign")
    git(w.repo, "config", "--unset", "user.signingkey")
    restore()

    config = w.config.read_text()
    w.config.write_text(config.replace("[release]\n", "[release]\nrequire_signed_tags = true\n", 1))
    _failed(_status(w), "ledger chain broken", "unsigned", "require_signed_tags")
    w.config.write_text(config)
    restore()

    git(w.repo, "tag", "-a", "forgepatch-v2/vhand/sm999", "-m", "made by hand", f"refs/tags/{TAG2}^{{commit}}")
    _failed(_status(w), "ledger chain broken", "forgepatch-v2/vhand/sm999", "no ledger entry")
    git(w.repo, "tag", "-d", "forgepatch-v2/vhand/sm999")
    restore()


def test_a_ledger_that_restarts_the_chain_while_older_tags_exist_is_broken(world):
    """The shipped-workflow failure: the ledger lost (not committed), the next release starts
    a new chain; the earlier release tag (with its trailers) is still in the repository."""
    w = world
    w.image = w.build()
    results = w.smoke()
    assert w.release(results).returncode == 0
    w.ledger.unlink()
    w.config.write_text(w.config.read_text().replace('tag_template = "forgepatch/{pin}/{arch}"',
                                                     'tag_template = "forgepatch-v2/{pin}/{arch}"'))
    assert w.release(results).returncode == 0
    assert len(json.loads(w.ledger.read_text())["releases"]) == 1
    _failed(_status(w), "ledger chain broken", TAG, "restarted a chain")
