"""Is (pin, arch) releasable now? The combination it would publish, or the precise reasons
it may not: missing results, a failing profile (with its signature), stale results (the
image was rebuilt since), results of another image or patchset, the patch files changed since
the fork branch was made, a branch or image made from other code than the pin names.

Every package the series patches has its fork branch judged: SGLang's in the fork repository
(``--repo``), each other package's (FlashInfer) in its checkout (``patching.series.
package_checkout``: where ``fork`` made it), each against the patchset of that package's part
of the series and the pin's revision of that package."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch.combination import (
    LABEL, PackageIdentity, Trailer, Upstream, branch_name, packages_problems, release_identity,
)
from forgepatch.combination import pin_identity as resolved
from forgepatch.combination.ledger import ProfileEvidence
from forgepatch.combination.records import AuditSummary
from forgepatch.combination.results import JobResult, Toolchain, imported_problems
from forgepatch.errors import BadInput
from forgepatch.infra.refs import same_digest
from forgepatch.patching.series import expected_packages as expected, for_package, load_series, package_checkout
from forgepatch.release import evidence as ev
from forgepatch.utctime import EPOCH


@dataclass
class Reason:
    code: str  # no-required-profiles | no-branch | patchset-changed | branch-upstream | no-image |
    #           image-patchset | image-upstream | missing-results | failing-profile | stale-results |
    #           image-packages | other-image | results-incomplete | tag-taken | tag-missing
    #           (no-branch, patchset-changed, branch-upstream of another package's branch name it)
    message: str
    profile: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **({"profile": self.profile} if self.profile else {})}


@dataclass
class PackageBranch:
    """The fork branch of a package besides SGLang, as found right (name, checkout, head)."""

    package: str
    repo: str
    branch: str
    head: str
    upstream: str | None
    patchset: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        return (f"{self.package} fork branch {self.branch} at {self.head} ({self.repo}), "
                f"upstream {self.upstream or '(unknown)'}, patchset {self.patchset}")


@dataclass
class Combination:
    pin: str
    arch: str
    branch: str
    commit: str
    upstream: str | None  # the fork branch's upstream commit
    patchset: str
    image: ev.ImageFacts
    profiles: dict[str, ProfileEvidence]  # profile -> the passing job it rests on
    results: list[ev.ResultsFile]  # the files the passing jobs came from
    packages: list[PackageBranch] = field(default_factory=list)  # the other packages' fork branches

    def identity(self) -> dict[str, Any]:
        return release_identity(self.pin, self.arch, self.commit, self.patchset, self.image.id, list(self.profiles))

    def toolchains(self) -> dict[str, Toolchain | None]:
        """The toolchain each passing profile ran on."""
        return {p: r.toolchain for p, r in self.profiles.items()}

    def audit(self) -> AuditSummary | None:
        """The kernel audit the smoke jobs carried from the build record (None: not run)."""
        return next((r.audit for r in self.profiles.values() if r.audit), None)


@dataclass
class Evaluation:
    arch: str
    pin: str
    reasons: list[Reason] = field(default_factory=list)
    combination: Combination | None = None
    tested: bool = False  # the results hold at least one job for (arch, pin)


@dataclass
class Inputs:
    """Everything ``evaluate`` reads: config, patch files, the fork repo, results, engine."""

    matrix: Any
    patches_dir: Path
    repo: Any  # fork.gitrepo.GitRepo
    results: list[ev.ResultsFile]
    api: Any  # low-level Docker API client
    image_override: str | None = None


def pairs(matrix, arch: str | None, pin: str | None) -> list[tuple[str, str]]:
    """(arch, pin) pairs of the matrix, filtered; BadInput for unknown names."""
    if arch is not None:
        matrix.arch(arch)
    if pin is not None:
        matrix.pin(pin)
    out = [(a, p) for a in matrix.arches for p in matrix.pins_of(a) if arch in (None, a) and pin in (None, p)]
    if arch is not None and pin is not None and not out:
        raise BadInput(f"--pin: {pin!r} is not built for {arch} (arches.{arch}.pins in matrix.toml)")
    return out


def required_profiles(matrix, arch: str, pin: str) -> list[str]:
    """Profiles smoke runs for (arch, pin) (``Matrix.combos``) that are ``required``."""
    return [prof for a, p, prof in matrix.combos() if (a, p) == (arch, pin) and matrix.profiles[prof].required]


def current_series(matrix, patches_dir: Path, arch: str):
    """The arch's series as the patch files are now (``patching.series.load_series``)."""
    return load_series(matrix, arch, patches_dir)


def expected_packages(matrix, series, pin: str) -> dict:
    """Every package besides sglang the arch's series patches, as the pin's image and fork
    branches must carry it (``patching.series.expected_packages``)."""
    return expected(matrix, series, pin)


def pin_identity(inp: Inputs, pin: str) -> Upstream:
    """The pin's recorded identity; a git pin's rev resolved in the fork repo when it is there."""
    return resolved(inp.matrix.pins[pin], inp.repo)


def evaluate(inp: Inputs, arch: str, pin: str) -> Evaluation:
    out = Evaluation(arch, pin)
    matrix = inp.matrix
    jobs = [(f, j) for f in inp.results for j in f.jobs if j.arch == arch and j.pin == pin]
    out.tested = bool(jobs)
    required = required_profiles(matrix, arch, pin)
    if not required:
        out.reasons.append(Reason("no-required-profiles", f"no required smoke profile is configured for {arch} on {pin}"))
        return out

    series = current_series(matrix, inp.patches_dir, arch)
    patchset = series.hash
    others = expected_packages(matrix, series, pin)  # each other package: the pin's release, its part's patchset
    want = pin_identity(inp, pin)
    name = branch_name(arch, pin)
    br = ev.branch(inp.repo, name)
    if br is None:
        out.reasons.append(Reason("no-branch", f"no fork branch {name} in {inp.repo.root}, local or remote-tracking "
                                  f"(fetch it: `{ev.fetch_hint(name)}`; or make it: "
                                  f"`forgepatch fork --arch {arch} --pin {pin} --repo {inp.repo.root} --rev REV`)"))
    else:
        out.reasons += _judge_branch(inp, br, arch, pin, for_package(series, "sglang", matrix), want, bool(others))
    branches = []
    for package, ident in others.items():
        reasons, found = _judge_package_branch(inp, series, arch, pin, package, ident)
        out.reasons += reasons
        branches += [found] if found is not None else []

    ran_on = max(((ev.parse_time(j.finished_at) or EPOCH, j.image_digest)
                  for _, j in jobs if j.image_digest), default=(None, None))[1]
    image = ev.current_image(inp.api, matrix.smoke.image_repo, arch, pin, inp.image_override, ran_on)
    if image is None:
        out.reasons.append(Reason("no-image", f"no image labelled {arch}/{pin} in the Docker engine (run `forgepatch build --arch {arch} --pin {pin}`)"))
    else:
        out.reasons += _judge_image(image, br, name, pin, patchset, want)
        out.reasons += _judge_packages(image, pin, others)

    profiles: dict[str, ProfileEvidence] = {}
    used: dict[str, ev.ResultsFile] = {}
    for prof in required:
        mine = [(f, j) for f, j in jobs if j.profile == prof]
        if not mine:
            where = ", ".join(str(f.path) for f in inp.results) or "no results file"
            out.reasons.append(Reason("missing-results", f"no smoke results for required profile {prof} ({where})", prof))
            continue
        if image is None:
            continue
        reason, record = _judge_profile(prof, mine, image, patchset)
        if record is None:
            out.reasons.append(reason)
        else:
            profiles[prof] = record
            used[record.results] = next(f for f, _ in mine if f.sha256 == record.results)
    if not out.reasons and br is not None and image is not None:
        out.combination = Combination(pin, arch, name, br.head, br.trailers.get(Trailer.UPSTREAM), patchset, image,
                                      profiles, list(used.values()), branches)
    return out


def _judge_branch(inp: Inputs, br: ev.BranchFacts, arch: str, pin: str, part, want: Upstream,
                  several: bool = False) -> list[Reason]:
    """SGLang's fork branch: made with the sglang part of the series (``part``: the whole
    series when it patches SGLang alone; ``several``: it patches other packages too), from
    the pin's code."""
    name, out, patchset = br.name, [], part.hash
    files = "the sglang patch files" if several else "the patch files"
    made_with = br.trailers.get(Trailer.PATCHSET)
    if made_with is None and part.patches:
        out.append(Reason("patchset-changed", f"branch {name} head {br.head[:12]} has no {Trailer.PATCHSET} trailer (not made by `forgepatch fork`); re-run fork"))
    elif made_with is not None and made_with != patchset:
        out.append(Reason("patchset-changed", f"patchset changed since branch {name} was made: it was made with patchset {made_with}, {files} now hash to {patchset} (re-run `forgepatch fork`)"))
    elif br.trailers.get(Trailer.ARCH, arch) != arch:
        out.append(Reason("patchset-changed", f"branch {name} carries patches for {br.trailers[Trailer.ARCH]}, not {arch}"))
    found = ev.branch_upstream(inp.repo, br, inp.matrix.upstream.package_dir)
    if found is not None and found.mismatch(want):
        out.append(Reason("branch-upstream", f"branch {name} was made from {found.describe()}, but pin {pin} is {want.describe()} (re-run `forgepatch fork --pin {pin}` with the pin's revision)"))
    return out


def _judge_package_branch(inp: Inputs, series, arch: str, pin: str, package: str,
                          want: PackageIdentity) -> tuple[list[Reason], PackageBranch | None]:
    """A package besides SGLang: its fork branch (the same name) in its checkout, where
    ``fork`` made it (``patching.series.package_checkout``), made with the patchset of that
    package's part of the series (``want.patchset``) from the pin's revision of it. The reasons
    name the package and the checkout; the branch when it is right."""
    name = branch_name(arch, pin)
    try:
        where = package_checkout(inp.matrix, series, pin, package)
        repo = ev.open_repo(where.checkout, f"pins.{pin}.packages.{package}.repo")
    except BadInput as exc:
        return [Reason("no-branch", f"{package}: its fork branch {name} cannot be checked: {exc}")], None
    with repo:
        br = ev.branch(repo, name)
        if br is None:
            return [Reason("no-branch", f"{package}: no fork branch {name} in {repo.root}, local or remote-tracking "
                           f"(fetch it there: `{ev.fetch_hint(name)}`; or make it: `forgepatch fork --arch {arch} "
                           f"--pin {pin} --repo SGLANG_CHECKOUT` makes the branch of every package)")], None
        out = []
        made_with = br.trailers.get(Trailer.PATCHSET)
        if made_with is None:
            out.append(Reason("patchset-changed", f"{package}: branch {name} in {repo.root} head {br.head[:12]} has no "
                              f"{Trailer.PATCHSET} trailer (not made by `forgepatch fork`); re-run fork"))
        elif made_with != want.patchset:
            out.append(Reason("patchset-changed", f"{package}: patchset changed since branch {name} in {repo.root} was "
                              f"made: it was made with patchset {made_with}, the {package} patch files now hash to "
                              f"{want.patchset} (re-run `forgepatch fork --arch {arch} --pin {pin}`)"))
        elif br.trailers.get(Trailer.ARCH, arch) != arch:
            out.append(Reason("patchset-changed", f"{package}: branch {name} in {repo.root} carries patches for "
                              f"{br.trailers[Trailer.ARCH]}, not {arch}"))
        pinned = repo.ref(where.rev)
        found = ev.branch_upstream(repo, br, where.package_dir)
        if pinned is None:
            out.append(Reason("branch-upstream", f"{package}: pin {pin}'s revision {where.rev} of it is not in "
                              f"{repo.root} (fetch it there)"))
        elif found is not None and found.revision != pinned:
            out.append(Reason("branch-upstream", f"{package}: branch {name} in {repo.root} was made from "
                              f"{found.describe()}, but pin {pin} names {package} at git {pinned[:12]} (re-run "
                              f"`forgepatch fork --arch {arch} --pin {pin}`)"))
        if out:
            return out, None
        return [], PackageBranch(package, str(repo.root), name, br.head, br.trailers.get(Trailer.UPSTREAM), made_with)


def _judge_image(image: ev.ImageFacts, br: ev.BranchFacts | None, name: str, pin: str, patchset: str,
                 want: Upstream) -> list[Reason]:
    out, which = [], image.ref or image.id[:19]
    built_with = image.labels.get(LABEL["patchset"])
    if built_with != patchset:
        out.append(Reason("image-patchset", f"image {which} was built with patchset {built_with or '(none)'}, the patch files now hash to {patchset} (rebuild it)"))
    found = image.upstream
    if found is None:
        out.append(Reason("image-upstream", f"image {which} records no upstream identity (label {LABEL['upstream']}); rebuild it with `forgepatch build --pin {pin}`"))
        return out
    if found.mismatch(want):
        out.append(Reason("image-upstream", f"image {which} was built from {found.describe()}, but pin {pin} is {want.describe()} (rebuild it with `forgepatch build --pin {pin}`)"))
    upstream = br.trailers.get(Trailer.UPSTREAM) if br else None
    if upstream and found.kind == "git" and found.revision and found.revision != upstream:
        out.append(Reason("image-upstream", f"image {which} was built from upstream {found.revision[:12]}, branch {name} is on {upstream[:12]}"))
    return out


def _judge_packages(image: ev.ImageFacts, pin: str, want: dict) -> list[Reason]:
    """Every other package the series patches must be in the image as validated: the pin's
    release of it, with the patchset of its part of the series (labels before packages were
    labelled name SGLang alone: such an image lacks them)."""
    which = image.ref or image.id[:19]
    return [Reason("image-packages", f"image {which}: {problem} (rebuild it with `forgepatch build --pin {pin}`)")
            for problem in packages_problems(image.labels, want)]


def _newest(rows: list[tuple[ev.ResultsFile, JobResult]]):
    return max(rows, key=lambda fj: (ev.parse_time(fj[1].finished_at) or EPOCH))


def _judge_profile(prof: str, mine, image: ev.ImageFacts, patchset: str) -> tuple[Reason | None, ProfileEvidence | None]:
    """The newest run of ``prof`` on exactly this image decides; else say why none counts."""
    on_image = [(f, j) for f, j in mine if j.image_id == image.id]
    if not on_image:
        f, j = _newest(mine)
        when = ev.parse_time(j.finished_at)
        if not j.image_id:
            return Reason("results-incomplete", f"smoke results for {prof} ({f.path}) do not record the image id they ran on (re-run `forgepatch smoke` with the docker runner)", prof), None
        if when is None or when < image.created:
            return Reason("stale-results", f"stale results for {prof}: they ran on image {j.image_id[:19]}"
                          f"{' at ' + ev.iso(when) if when else ''}; image {image.ref or image.id[:19]} ({image.id[:19]}) was rebuilt since, at {ev.iso(image.created)} (re-run `forgepatch smoke`)", prof), None
        return Reason("other-image", f"smoke results for {prof} are for image {j.image_id[:19]}, not the current image {image.id[:19]}", prof), None
    f, j = _newest(on_image)
    when = ev.parse_time(j.finished_at)
    if when is None:
        return Reason("results-incomplete", f"smoke results for {prof} ({f.path}) do not record when they ran (finished_at)", prof), None
    if when < image.created:
        return Reason("stale-results", f"stale results for {prof}: they finished at {ev.iso(when)}, before image {image.id[:19]} was created at {ev.iso(image.created)}", prof), None
    if j.patchset != patchset:
        return Reason("results-incomplete" if not j.patchset else "patchset-changed",
                      f"smoke results for {prof} record patchset {j.patchset or '(none)'}, the patch files now hash to {patchset}", prof), None
    if j.image_digest and image.digest_ref and not same_digest(j.image_digest, image.digest_ref):
        return Reason("other-image", f"smoke results for {prof} ran on {j.image_digest}, the image is now {image.digest_ref}", prof), None
    if j.status != "pass":
        what = j.label or j.summary or j.status
        where = f" in {j.failing_phase}" if j.failing_phase else ""
        return Reason("failing-profile", f"profile {prof} {'failed' if j.status == 'fail' else j.status}: {what}"
                      f"{f' [{j.signature}]' if j.signature else ''}{where} (job {j.id}, {f.path})", prof), None
    if problems := imported_problems(image.labels, j.imported):
        return Reason("imported-packages", f"smoke results for {prof} (job {j.id}, {f.path}) ran with other packages "
                      f"than image {image.ref or image.id[:19]} carries: {'; '.join(problems)}", prof), None
    # the toolchain re-read from its dump: the evidence records every field (None where unknown)
    record = ProfileEvidence(status="pass", job=j.id, finished_at=j.finished_at, image_id=j.image_id,
                             image_ref=j.image_digest, audit=j.audit,
                             patchset=j.patchset, results=f.sha256,
                             toolchain=Toolchain.model_validate(j.toolchain.model_dump(mode="json")) if j.toolchain else None)
    return None, record
