"""Tamper evidence: every ledger entry is bound to its annotated release tag.

The ledger alone is a hash chain (``ledger.chain_problem``): an edited entry shows, unless
the editor also recomputes the digests. So the tag message of each release carries
``Forgepatch-Ledger-Entry`` (the sha256 of the entry: every field but the tag object's id,
which is the tag itself, and the entry's own digest), ``Forgepatch-Ledger-Prev`` (the digest
of the entry before it: the chain head at release) and ``Forgepatch-Released-At``. A
re-hashed edit then disagrees with the tag; a removed entry leaves a tag the ledger does not
hold (a removed last entry: a tag whose Prev is the ledger's last digest); a re-created tag
is another tag object than the ledger recorded. Tags are signed when the user's git signs
(``GitRepo.signing``), and every signed release tag must verify (``git verify-tag``).

What this does not catch: someone who can rewrite both the ledger and the tags (delete and
re-create every tag, unsigned) can forge a consistent history. Signed tags close that: once
a tag of the ledger is signed, every later one must be signed and verify.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forgepatch.combination import LEDGER_GENESIS, Trailer, release_tag_form
from forgepatch.combination.ledger import LedgerEntry, content_digest  # noqa: F401  (re-exported)
from forgepatch.release.ledger import chain_problem


def tag_trailers(entry: LedgerEntry) -> dict[str, str]:
    """The trailers binding a release tag to ``entry`` (which carries ``prev``)."""
    return {Trailer.LEDGER_ENTRY: entry.content_digest(), Trailer.LEDGER_PREV: entry.prev or LEDGER_GENESIS,
            Trailer.RELEASED_AT: entry.released_at or ""}


@dataclass
class ChainReport:
    entries: int = 0
    problem: str | None = None  # the first break, in words
    tags: int = 0  # entries checked against their tags
    signed: int = 0  # of those, tags whose signature verified
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.problem is None

    def summary(self) -> str:
        if self.problem:
            return self.problem
        signed = f", {self.signed} signed tag(s) verified" if self.signed else ", tags unsigned"
        return (f"{self.entries} entries, hash chain intact, each entry matches the digest its tag recorded"
                f"{signed}; no release tag outside the ledger")

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "entries": self.entries, "problem": self.problem, "tags_checked": self.tags,
                "signed_tags_verified": self.signed}


def entry_problem(i: int, entry: LedgerEntry, facts, repo=None) -> str | None:
    """Why ``entry`` (number ``i``) and its tag (``TagFacts`` or None) disagree, else None."""
    label = f"entry {i} ({entry.tag})"
    if facts is None:
        return f"{label}: its tag is missing from {getattr(repo, 'root', 'the repository')} (deleted? fetch the tags: git fetch --tags)"
    if not facts.annotated or facts.object != entry.tag_object:
        return (f"{label}: the tag is {'a lightweight tag' if not facts.annotated else 'tag object ' + facts.object[:12]}"
                f", the ledger recorded {str(entry.tag_object)[:12]} (tag re-created)")
    if entry.commit and facts.commit != entry.commit:
        return (f"{label}: the tag points at commit {facts.commit[:12]}, the ledger recorded {entry.commit[:12]} "
                f"(tag re-pointed at other code)")
    recorded = facts.trailers.get(Trailer.LEDGER_ENTRY)
    if not recorded:
        return f"{label}: its tag message carries no {Trailer.LEDGER_ENTRY} (made without tamper evidence)"
    if facts.trailers.get(Trailer.LEDGER_PREV) != (entry.prev or LEDGER_GENESIS):
        return f"{label}: its tag followed {facts.trailers.get(Trailer.LEDGER_PREV, '?')[:12]} in the chain, the ledger says {(entry.prev or LEDGER_GENESIS)[:12]}"
    if recorded != entry.content_digest():
        when = facts.trailers.get(Trailer.RELEASED_AT)
        which = f" (released_at: ledger {entry.released_at}, tag {when})" if when and when != entry.released_at else ""
        return f"{label}: the entry differs from the one its tag recorded at release{which} (edited after release)"
    return None


def must_sign(repo, require_signed: bool) -> str | None:
    """Why every release tag must be signed here (None: it need not)."""
    if require_signed:
        return "matrix.toml [release] require_signed_tags = true"
    try:
        how = repo.signing()
    except Exception:  # noqa: BLE001 - an unreadable git config asks for nothing
        how = None
    return f"this repository signs tags ({how}: tag.gpgSign / user.signingkey)" if how else None


def check_chain(entries: list[LedgerEntry], repo, check_signatures: bool = True, *,
                tag_template: str | None = None, require_signed: bool = False) -> ChainReport:
    """The whole ledger against the repository's tags: the hash chain, each entry against the
    digest its tag carries, the commit it points at (and the tag's signature, required where
    the repository signs or the matrix says so), and no release tag the ledger lacks: neither a
    tag carrying a ledger entry (an entry removed, or a ledger that restarted a chain while older
    release tags exist) nor a tag of ``tag_template``'s form."""
    report = ChainReport(len(entries))
    report.problem = chain_problem(entries)
    if report.problem:
        return report
    signing_required = must_sign(repo, require_signed)
    ours = set()
    signed_by: int | None = None  # the first entry whose tag is signed
    for i, entry in enumerate(entries, 1):
        facts = repo.tag(entry.tag)
        report.problem = entry_problem(i, entry, facts, repo)
        if report.problem:
            return report
        report.tags += 1
        ours.add(facts.object)
        if not facts.signature and signing_required:
            report.problem = f"entry {i} ({entry.tag}): its tag is unsigned, but {signing_required}"
            return report
        if not facts.signature and signed_by is not None:  # signing never stops silently
            report.problem = (f"entry {i} ({entry.tag}): its tag is unsigned, but the tag of entry {signed_by} "
                              f"is signed (re-created without a signature?)")
            return report
        if facts.signature:
            signed_by = signed_by or i
        if facts.signature and check_signatures:
            why = repo.verify_tag(entry.tag)
            if why:
                report.problem = f"entry {i} ({entry.tag}): its tag is signed ({facts.signature}) but the signature does not verify: {why}"
                return report
            report.signed += 1
    digests = {e.digest: n for n, e in enumerate(entries, 1)}
    form = release_tag_form(tag_template)
    ledger_tags = {e.tag for e in entries}
    for name in repo.tag_names():
        facts = repo.tag(name)
        if facts is None or facts.object in ours:
            continue
        carries = facts.annotated and Trailer.LEDGER_ENTRY in facts.trailers
        if not carries:
            if form is not None and form.fullmatch(name) and name not in ledger_tags:
                report.problem = (f"release tag {name} (of [release] tag_template's form) has no ledger entry "
                                  "(a release the ledger lost, or a tag made by hand)")
                return report
            continue
        prev = facts.trailers.get(Trailer.LEDGER_PREV)
        if prev in digests or (prev == LEDGER_GENESIS and not entries):
            n = digests.get(prev, 0)
            if n == len(entries):
                report.problem = (f"release tag {name} follows the ledger's last entry ({entries[-1].tag if entries else 'none'}) "
                                  "but has no entry: the last entry was removed")
            else:
                report.problem = f"release tag {name} follows entry {n} but has no entry of its own: an entry was removed"
            return report
        report.problem = (f"release tag {name} carries a ledger entry ({facts.trailers[Trailer.LEDGER_ENTRY][:12]}, after "
                          f"{str(prev)[:12]}) the ledger does not hold: the ledger restarted a chain while older release "
                          f"tags exist (or lost entries); restore it from git history or rebuild it from the tags")
        return report
    return report
