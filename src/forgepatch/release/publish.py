"""``forgepatch release``: tag validated combinations, tag their images, record them.

Per (arch, pin), under the ledger lock: evaluate; refuse with the reasons, or compare with
what the tag name already holds — the same combination is a no-op, a different one is
refused (tags never move and are never deleted). A new release then: archives the results
file(s) next to the ledger, creates the annotated tag on the fork branch head, points the
image's ``validated`` tag at the image, and appends the ledger entry — the commit point. If
a step after the git tag fails, the tag and image tag this run made are rolled back.

The registry tags come after the commit point, journaled (``release.pending``): the release
records them as pending before it appends its entry, then points them at the digest and
clears the record. A run killed or failed in between leaves the record; the next ``release``
completes the tags of a release whose entry is in the ledger, or drops the record of one
whose entry is not (nothing was tagged then), and says so in one line. So the registry never
carries the tags of a release the ledger does not have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from forgepatch import utctime
from forgepatch.combination import LABEL, Trailer, release_identity, release_tag, validated_ref
from forgepatch.combination.ledger import ImageRecord, LedgerEntry, ResultsArchive
from forgepatch.infra.gitrepo import format_trailers
from forgepatch.errors import BadInput, Failure
from forgepatch.infra.gitrepo import TagFacts
from forgepatch.infra.refs import repository
from forgepatch.infra.atomic import uninterrupted
from forgepatch.infra.journal import notify
from forgepatch.release import evidence as ev
from forgepatch.release import integrity, pending, promote
from forgepatch.release.check import Combination, Evaluation, Inputs, Reason, evaluate, pairs
from forgepatch.release.ledger import Ledger, chain_problem

STATUSES = ("released", "unchanged", "recorded", "would-release", "refused", "skipped")


@dataclass
class Outcome:
    arch: str
    pin: str
    tag: str
    status: str  # one of STATUSES
    reasons: list[Reason] = field(default_factory=list)
    combination: Combination | None = None
    entry: LedgerEntry | None = None
    promotion: Any = None  # release.promote.Promotion: the registry tags this release sets

    def to_json(self) -> dict[str, Any]:
        comb = self.combination
        return {
            "arch": self.arch, "pin": self.pin, "tag": self.tag, "status": self.status,
            "reasons": [r.to_json() for r in self.reasons],
            "combination": None if comb is None else {
                **comb.identity(), "branch": comb.branch, "upstream": comb.upstream, "image": comb.image.to_json(),
                "packages": [b.to_json() for b in comb.packages],
                "profiles": {p: r.doc() for p, r in comb.profiles.items()},
                "results": [{"path": str(f.path), "sha256": f.sha256} for f in comb.results]},
            "registry": None if self.promotion is None else {"digest": self.promotion.digest_ref, "tags": self.promotion.refs()},
            "entry": None if self.entry is None else self.entry.doc(),
        }


def tag_name(matrix, arch: str, pin: str) -> str:
    try:
        return release_tag(matrix.release.tag_template, pin, arch)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def toolchain_lines(comb: Combination) -> list[str]:
    """``toolchain: torch ... · NVIDIA H200``: one line when every profile ran on the same
    stack, else one per profile."""
    found = {p: (tc.line() if tc else "not recorded (results of an older forgepatch)")
             for p, tc in comb.toolchains().items()}
    if len(set(found.values())) == 1:
        return [f"toolchain: {next(iter(found.values()))}"]
    return ["toolchain:"] + [f"  {p}: {line}" for p, line in found.items()]


def audit_lines(comb: Combination) -> list[str]:
    found = comb.audit()
    return [f"kernel audit: {found.line()}"] if found else []


def tag_message(comb: Combination, tag: str, ledger: dict[str, str] | None = None) -> str:
    """The annotated tag's message; ``ledger``: the trailers binding it to its ledger entry
    (``integrity.tag_trailers``)."""
    img = comb.image
    up = img.upstream
    lines = [f"forgepatch release {comb.pin} {comb.arch}: {len(comb.profiles)} required smoke profile(s) passed", "",
             f"fork branch {comb.branch} at {comb.commit}",
             f"upstream {comb.upstream or '(unknown)'}, patchset {comb.patchset}",
             *(b.line() for b in comb.packages),
             f"image {img.id} ({img.ref or 'untagged'}), built {ev.iso(img.created)}"
             + (f", digest {img.digest_ref}" if img.digest_ref else ""),
             f"image upstream {up.describe() if up else '(not recorded)'}, engine {img.labels.get(LABEL['engine']) or '(not recorded)'}",
             *toolchain_lines(comb),
             *audit_lines(comb),
             "smoke results:"]
    width = max(len(p) for p in comb.profiles)
    for prof, rec in comb.profiles.items():
        lines.append(f"  {prof:<{width}}  pass  job {rec.job}  finished {rec.finished_at}")
    for f in comb.results:
        lines.append(f"results file {f.path.name} sha256:{f.sha256}")
    trailers = format_trailers({
        Trailer.PIN: comb.pin, Trailer.ARCH: comb.arch, Trailer.COMMIT: comb.commit, Trailer.PATCHSET: comb.patchset,
        Trailer.IMAGE: img.id, Trailer.IMAGE_DIGEST: img.digest_ref, Trailer.PROFILES: ",".join(sorted(comb.profiles)),
        Trailer.RESULTS: ",".join(f.sha256 for f in comb.results),
        **(ledger or {}),
    })
    return "\n".join(lines) + "\n\n" + trailers


def tag_identity(facts: TagFacts) -> dict[str, Any]:
    t = facts.trailers
    return release_identity(t.get(Trailer.PIN), t.get(Trailer.ARCH), facts.commit, t.get(Trailer.PATCHSET),
                            t.get(Trailer.IMAGE), [p for p in t.get(Trailer.PROFILES, "").split(",") if p])


def _differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = [k for k in a if a[k] != b.get(k)]
    return ", ".join(f"{k} {_short(b.get(k))} -> {_short(a[k])}" for k in keys)


def _short(value: Any) -> str:
    if isinstance(value, str) and len(value) > 19:
        return value[:19]
    return str(value)


def _image_record(comb: Combination, validated: str, promotion: Any = None) -> ImageRecord:
    """The image as the entry records it; its tags without the ``validated`` tag the
    release itself sets (so an interrupted release's entry can be rebuilt exactly)."""
    return comb.image.record(validated, promotion.refs() if promotion is not None else None)


def make_entry(comb: Combination, tag: TagFacts, validated: str, archives: dict[str, str], repo, now: datetime,
               promotion: Any = None, prev: str | None = None) -> LedgerEntry:
    toolchains = list(comb.toolchains().values())
    common = toolchains[0] if toolchains and all(tc == toolchains[0] for tc in toolchains) else None
    return LedgerEntry(
        tag=tag.name, tag_object=tag.object,
        pin=comb.pin, arch=comb.arch, repo=str(repo.root),
        branch=comb.branch, commit=comb.commit, upstream=comb.upstream, patchset=comb.patchset,
        image=_image_record(comb, validated, promotion),
        audit=comb.audit(),
        toolchain=common,
        profiles=comb.profiles,
        results=[ResultsArchive(path=str(f.path), sha256=f.sha256, archive=archives[f.sha256]) for f in comb.results],
        released_at=ev.iso(now), prev=prev,
    )


def release(inp: Inputs, ledger: Ledger, arch: str | None = None, pin: str | None = None,
            dry_run: bool = False) -> list[Outcome]:
    """Release every selected (arch, pin) that is releasable; see the module docstring.

    Pairs without any smoke job in the results are ``skipped`` unless both ``arch`` and
    ``pin`` name them (then they are refused for missing results)."""
    dropped = [] if dry_run else pending.recover(ledger)  # registry tags of an interrupted release: set, or dropped
    outcomes: list[Outcome] = []
    try:
        outcomes = _release(inp, ledger, arch, pin, dry_run)
        return outcomes
    finally:  # one line per interrupted release: finished by this run (its git tag was there), or undone
        recorded = {o.tag for o in outcomes if o.status == "recorded"}
        for tag in dropped:
            notify(f"{ledger.path}: completed an interrupted release of {tag}: its git tag was made, its ledger "
                   f"entry and registry tags are written now" if tag in recorded else pending.rolled_back(ledger, tag))


def _release(inp: Inputs, ledger: Ledger, arch: str | None, pin: str | None, dry_run: bool) -> list[Outcome]:
    targets = pairs(inp.matrix, arch, pin)
    if not targets:
        raise BadInput("no arch/pin pair of matrix.toml matches --arch/--pin")
    names = {t: tag_name(inp.matrix, *t) for t in targets}
    for name in names.values():
        ev.check_tag_name(inp.repo, name)
    explicit = arch is not None and pin is not None
    entries = ledger.read(required=False)
    planned = [_one(inp, ledger, entries, a, p, names[(a, p)], explicit, True) for a, p in targets]
    if dry_run or not any(o.status == "would-release" for o in planned):
        return planned  # nothing to write: no lock file, no ledger directory
    with ledger.lock():  # decide again under the lock: another release may have run meanwhile
        entries = ledger.read(required=False)
        outcomes = []
        for a, p in targets:
            out = _one(inp, ledger, entries, a, p, names[(a, p)], explicit, False)
            if out.entry is not None:
                entries.append(out.entry)
            outcomes.append(out)
        return outcomes


def _one(inp: Inputs, ledger: Ledger, entries: list[LedgerEntry], arch: str, pin: str, tag: str,
         explicit: bool, dry_run: bool) -> Outcome:
    problem = chain_problem(entries)
    if problem:
        raise Failure(f"{ledger.path}: ledger integrity check failed, {problem}; releasing nothing (see `forgepatch verify`)")
    evaluation: Evaluation = evaluate(inp, arch, pin)
    out = Outcome(arch, pin, tag, "refused", list(evaluation.reasons), evaluation.combination)
    if not evaluation.tested and not explicit:
        out.status = "skipped"
        out.reasons = [Reason("missing-results", f"no smoke results for {arch} on {pin}")]
        return out
    if out.reasons:
        return out
    comb = evaluation.combination
    assert comb is not None
    want = comb.identity()
    recorded = [e for e in entries if e.tag == tag]
    existing = inp.repo.tag(tag)
    if recorded:
        had = recorded[-1].identity()
        if had != want:
            out.reasons.append(Reason("tag-taken", f"tag {tag} already names a different combination ({_differences(want, had)}); tags are immutable"))
        elif existing is None or existing.object != recorded[-1].tag_object:
            out.reasons.append(Reason("tag-missing", f"tag {tag} is in the ledger but {'missing from' if existing is None else 'different in'} {inp.repo.root}; run `forgepatch verify {tag}`"))
        else:
            out.status = "unchanged"
        return out
    if existing is not None:
        if not existing.annotated or tag_identity(existing) != want:
            had = tag_identity(existing) if existing.annotated else {"commit": existing.commit}
            out.reasons.append(Reason("tag-taken", f"tag {tag} already exists in {inp.repo.root} for a different combination ({_differences(want, had)}); tags are immutable"))
            return out
    out.reasons += _registry_reasons(inp, out, comb)
    if out.reasons:
        return out
    if dry_run:
        out.status = "would-release"
        return out
    return _publish(inp, ledger, out, comb, existing)


def _registry_reasons(inp: Inputs, out: Outcome, comb: Combination) -> list[Reason]:
    """The registry side of a release (``release.promote``): the digest to promote, and
    whether the registry can take its tags. Unreachable registry / refused credentials are
    bad input (exit 2) before anything is tagged."""
    repo = inp.matrix.smoke.image_repo
    ran = {r.image_ref for r in comb.profiles.values() if r.image_ref}
    ran = {d for d in ran if repository(d) == repo}
    if len(ran) > 1:
        return [Reason("other-image", f"the passing profiles ran on different digests: {', '.join(sorted(ran))}")]
    digest = next(iter(ran), None) or comb.image.digest_ref
    if not digest:
        if promote.needs_registry(repo):
            return [Reason("not-pushed", f"image {comb.image.ref or comb.image.id[:19]} has no digest in {repo}: push it "
                           f"(`forgepatch build --arch {comb.arch} --pin {comb.pin} --push`) and smoke that digest")]
        return []
    out.promotion = promote.plan(digest, comb.pin, comb.arch, out.tag)
    comb.image.digest_ref = digest
    return [Reason("registry", msg) for msg in promote.problems(out.promotion, comb.image.id)]


def _publish(inp: Inputs, ledger: Ledger, out: Outcome, comb: Combination, existing: TagFacts | None) -> Outcome:
    """Write the release (or, with ``existing``, record a tag an interrupted run made)."""
    api, now = inp.api, utctime.now()
    archives = {f.sha256: str(ledger.archive_results(f.data).relative_to(ledger.path.parent)) for f in comb.results}
    validated = validated_ref(inp.matrix.smoke.image_repo, comb.pin, comb.arch)
    if existing is not None:  # an interrupted run's tag: its entry is rebuilt exactly, or refused
        now = ev.parse_time(existing.trailers.get(Trailer.RELEASED_AT, "")) or now
    # the entry before its tag exists: the tag carries the entry's digest and the chain head
    draft = make_entry(comb, TagFacts(out.tag, "", comb.commit, True), validated, archives, inp.repo, now,
                       out.promotion, prev=ledger.head())
    trailers = integrity.tag_trailers(draft)
    created = None
    if existing is None:
        created = inp.repo.create_tag(out.tag, comb.commit, tag_message(comb, out.tag, trailers))
        if created is None:  # lost a race to a process using another ledger
            existing = inp.repo.tag(out.tag)
            if existing is None or not existing.annotated or tag_identity(existing) != comb.identity():
                out.reasons.append(Reason("tag-taken", f"tag {out.tag} was just created by another process for a different combination"))
                return out
    differ = [k for k, v in trailers.items() if existing is not None and existing.trailers.get(k) != v]
    if created is None and differ:
        out.reasons.append(Reason("tag-unrecorded", (
            f"tag {out.tag} exists (left by an interrupted release?) but its {', '.join(differ)} "
            f"do(es) not match this release's ledger entry; check it, delete it (git tag -d {out.tag}) and release again")))
        return out
    facts = created or existing
    local = comb.image.local
    before = ev.resolve_tag(api, validated) if local else None
    committed = False
    try:
        if local:
            ev.set_image_tag(api, comb.image.id, validated)
        if out.promotion is not None:  # the registry tags to set once the entry is written
            pending.add(ledger, out.tag, out.promotion)
        # the commit point. Ctrl-C is held off across it: a KeyboardInterrupt raised just after
        # the ledger's rename must not reach the rollback below (which would delete the git
        # tag of a release the ledger has)
        with uninterrupted():
            out.entry = ledger.append(draft.model_copy(update={"tag_object": facts.object}))
            committed = True
    except BaseException:
        if committed:  # interrupted after the commit point: the next release sets the registry tags
            raise
        if out.promotion is not None:
            pending.drop(ledger, out.tag)
        if created is not None:  # roll back the tag this run made (only if it is still ours)
            inp.repo.delete_ref(f"refs/tags/{created.name}", created.object)
        if local and before and before != comb.image.id:
            ev.set_image_tag(api, before, validated)
        elif local and not before:
            ev.remove_image_tag(api, validated)
        raise
    if out.promotion is not None:
        pending.complete(ledger, out.tag)  # rolled forward by the next release if this fails
    out.status = "released" if created is not None else "recorded"
    return out
