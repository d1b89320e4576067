"""``forgepatch verify TAG``: re-check a release against the ledger, the repo, the engine
and the archived results; the first mismatch is the verdict.

Checks, in order: the ledger's hash chain; the tag exists, is the annotated tag object the
ledger recorded and points at the recorded commit; the tag message's trailers agree with the
ledger entry, including the digest of the whole entry it recorded at release (and its
signature verifies, when signed); the whole chain against the repository's tags
(``integrity.check_chain``: every entry against its tag, no release tag the ledger lacks);
the fork branch still points at that commit; the image still exists with the
recorded labels, its build tag still names it (else it was rebuilt) and the ``validated``
tag names it (when this is the newest release of that pin and arch); the archived results
file has its recorded sha256 and still shows every recorded profile passing on that image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from forgepatch.combination import LABEL, Trailer, branch_name
from forgepatch.combination.ledger import LedgerEntry
from forgepatch.combination.results import SmokeResults
from forgepatch.errors import BadInput
from forgepatch.infra.gitrepo import GitRepo, TagFacts
from forgepatch.release import evidence as ev
from forgepatch.release import integrity, promote
from forgepatch.release.ledger import Ledger, chain_problem, sha256_bytes
from forgepatch.infra.refs import digest_of
from forgepatch.release.publish import tag_identity


@dataclass
class Check:
    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


@dataclass
class Verification:
    tag: str
    checks: list[Check] = field(default_factory=list)
    entry: LedgerEntry | None = None

    @property
    def mismatch(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)

    def to_json(self) -> dict[str, Any]:
        bad = self.mismatch
        return {"tag": self.tag, "ok": bad is None, "mismatch": bad.to_json() if bad else None,
                "checks": [c.to_json() for c in self.checks], "entry": None if self.entry is None else self.entry.doc()}


class _Stop(Exception):
    pass


def verify(repo: GitRepo, ledger: Ledger, tag: str, api_factory: Callable[[], Any], matrix=None) -> Verification:
    entries = ledger.read(required=True)
    out = Verification(tag)

    def check(name: str, ok: bool, detail: str) -> None:
        """A passing test records nothing (``detail`` describes the failure); a group
        records its summary with ``ok=None``."""
        if ok is None:
            out.checks.append(Check(name, True, detail))
        elif not ok:
            out.checks.append(Check(name, False, detail))
            raise _Stop

    try:
        problem = chain_problem(entries)
        check("ledger", problem is None, f"{ledger.path}: {problem}")
        check("ledger", None, f"{len(entries)} entries, hash chain intact")
        mine = [e for e in entries if e.tag == tag]
        facts = repo.tag(tag)
        if not mine:
            if facts is None:
                raise BadInput(f"verify: unknown tag {tag!r} (not in {ledger.path}, not in {repo.root})")
            check("entry", False, f"tag {tag} exists in {repo.root} but has no entry in {ledger.path}")
        entry = out.entry = mine[-1]
        _check_tag(check, repo, tag, entry, facts, entries.index(entry) + 1)
        release = getattr(matrix, "release", None)
        chain = integrity.check_chain(entries, repo, tag_template=getattr(release, "tag_template", None),
                                      require_signed=bool(getattr(release, "require_signed_tags", False)))
        check("chain", chain.ok, f"{ledger.path}: {chain.problem}")
        check("chain", None, chain.summary())
        _check_branch(check, repo, entry)
        newest = [e for e in entries if (e.pin, e.arch) == (entry.pin, entry.arch)][-1] is entry
        _check_image(check, api_factory(), entry, newest)
        _check_results(check, ledger, entry)
    except _Stop:
        pass
    return out


def _check_tag(check, repo: GitRepo, tag: str, entry: LedgerEntry, facts: TagFacts | None, number: int) -> None:
    check("tag", facts is not None, f"tag {tag} is missing from {repo.root} (the ledger records {str(entry.tag_object)[:12]})")
    check("tag", facts.annotated, f"tag {tag} is a lightweight tag now; the release made an annotated one")
    check("tag", facts.object == entry.tag_object,
          f"tag {tag} is tag object {facts.object[:12]}, the ledger recorded {str(entry.tag_object)[:12]} (tag re-created)")
    check("tag", facts.commit == entry.commit, f"tag {tag} points at {facts.commit[:12]}, the ledger recorded {entry.commit[:12]}")
    got, want = tag_identity(facts), entry.identity()
    diff = [k for k in want if want[k] != got.get(k)]
    shas = ",".join(r.sha256 for r in entry.results)
    if not diff and facts.trailers.get(Trailer.RESULTS) != shas:
        diff = ["results sha256"]
    check("tag-message", not diff,
          f"ledger and tag message disagree on {', '.join(diff)}" + (f": ledger {_s(want.get(diff[0]))}, tag {_s(got.get(diff[0]))}" if diff and diff[0] in want else ""))
    problem = integrity.entry_problem(number, entry, facts)
    check("tag-message", problem is None, str(problem))
    signed = ""
    if facts.signature:
        why = repo.verify_tag(tag)
        check("signature", why is None, f"tag {tag} is signed ({facts.signature}) but the signature does not verify: {why}")
        signed = f", {facts.signature} signature verified"
    check("tag", None, f"{tag} -> {facts.commit[:12]} (tag object {facts.object[:12]}), message agrees with the ledger"
                       f" (entry digest {facts.trailers.get(Trailer.LEDGER_ENTRY, '')[:12]}){signed}")


def _check_branch(check, repo: GitRepo, entry: LedgerEntry) -> None:
    name = entry.branch or branch_name(entry.arch, entry.pin)
    br = ev.branch(repo, name)
    check("branch", br is not None, f"fork branch {name} is gone from {repo.root}, local and remote-tracking "
                                    f"(a checkout without it: `{ev.fetch_hint(name)}`)")
    check("branch", br.head == entry.commit,
          f"fork branch {name} moved: it is at {br.head[:12]}, the release tagged {entry.commit[:12]}")
    made_with = br.trailers.get(Trailer.PATCHSET)
    check("branch", made_with in (None, entry.patchset),
          f"fork branch {name} head carries patchset {made_with}, the ledger recorded {entry.patchset}")
    check("branch", None, f"{name} at {br.head[:12]}")


def _check_image(check, api, entry: LedgerEntry, newest: bool) -> None:
    rec = entry.image
    image_id = rec.id
    image = ev.inspect_image(api, image_id) if image_id else None
    in_registry = bool(rec.digest_ref and rec.registry_tags)
    if image is None and in_registry:
        _check_registry(check, entry, newest)  # not in this engine: the registry is the evidence
        return
    check("image", image is not None, f"image {str(image_id)[:19]} is no longer in the Docker engine")
    labels = image.labels
    for key, want in ((LABEL["arch"], entry.arch), (LABEL["pin"], entry.pin), (LABEL["patchset"], entry.patchset)):
        check("image", labels.get(key) == want, f"image {image_id[:19]} has label {key}={labels.get(key)!r}, the ledger recorded {want!r}")
    if rec.ref:
        now = ev.resolve_tag(api, rec.ref)
        check("image", now in (None, image_id),
              f"image rebuilt since release: {rec.ref} now names {str(now)[:19]}, the release validated {image_id[:19]}")
    if newest and rec.validated and not in_registry:  # else the registry's tag is the one that counts
        now = ev.resolve_tag(api, rec.validated)
        check("image", now == image_id,
              f"{rec.validated} names {str(now)[:19] if now else 'nothing'}, the release validated {image_id[:19]}")
    check("image", None, f"{image_id[:19]} ({rec.ref or 'untagged'})")
    if in_registry:
        _check_registry(check, entry, newest)


def _check_registry(check, entry: LedgerEntry, newest: bool) -> None:
    """The registry tags still name the recorded digest, whose labels match the ledger."""
    for ok, detail in promote.check(entry, newest):
        check("registry", ok, detail)
    rec = entry.image
    shown = rec.registry_tags if newest else rec.registry_tags[1:]
    check("registry", None, f"{', '.join(shown)} -> {str(digest_of(rec.digest_ref))[:19]}")


def _check_results(check, ledger: Ledger, entry: LedgerEntry) -> None:
    jobs = []
    for rec in entry.results:
        data = ledger.archived_results(rec.sha256)
        check("results", data is not None, f"archived results {rec.archive} are missing")
        check("results", sha256_bytes(data) == rec.sha256, f"archived results {rec.archive} do not hash to {rec.sha256[:12]} (edited)")
        try:
            jobs += SmokeResults.parse(rec.archive or rec.sha256, data).jobs
        except BadInput:
            check("results", False, f"archived results {rec.archive} are not a results document")
    image = entry.image
    created = ev.parse_time(image.created)
    profiles = entry.profiles
    check("results", bool(profiles), "the ledger entry records no profiles")
    for prof, rec in profiles.items():
        job = next((j for j in jobs if j.id == rec.job and j.profile == prof and j.finished_at == rec.finished_at), None)
        check("results", job is not None, f"profile {prof}: job {rec.job} is not in the archived results")
        check("results", (job.arch, job.pin) == (entry.arch, entry.pin), f"profile {prof}: job {job.id} is for {job.arch}/{job.pin}")
        check("results", job.status == "pass", f"profile {prof}: job {job.id} is {job.status}, not pass")
        check("results", job.image_id == image.id, f"profile {prof}: job ran on image {str(job.image_id)[:19]}, not {str(image.id)[:19]}")
        check("results", job.patchset == entry.patchset, f"profile {prof}: job recorded patchset {job.patchset}, not {entry.patchset}")
        when = ev.parse_time(job.finished_at)
        check("results", when is not None and created is not None and when >= created, f"profile {prof}: job finished before the image was created")
    check("results", None, f"{len(profiles)} profile(s) passed on {str(image.id)[:19]}: {', '.join(profiles)}")


def _s(value: Any) -> str:
    text = str(value)
    return text[:19] if len(text) > 19 else text
