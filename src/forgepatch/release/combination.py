"""Is (pin, arch) releasable now? The combination it would publish, or the precise reasons
it may not: missing results, a failing profile (with its signature), stale results (the
image was rebuilt since), the patch files changed since the fork branch was made."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch.release import evidence as ev


@dataclass
class Reason:
    code: str  # no-required-profiles | no-branch | patchset-changed | no-image | image-patchset |
    #           image-upstream | missing-results | failing-profile | stale-results | other-image |
    #           results-incomplete | tag-taken | tag-missing
    message: str
    profile: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **({"profile": self.profile} if self.profile else {})}


@dataclass
class Combination:
    pin: str
    arch: str
    branch: str
    commit: str
    upstream: str | None
    patchset: str
    image: ev.ImageFacts
    profiles: dict[str, dict[str, Any]]  # profile -> the passing job's record
    results: list[ev.ResultsFile]  # the files the passing jobs came from

    def identity(self) -> dict[str, Any]:
        return identity(self.pin, self.arch, self.commit, self.patchset, self.image.id, list(self.profiles))


def identity(pin, arch, commit, patchset, image_id, profiles) -> dict[str, Any]:
    """What makes two releases the same combination (results files may differ)."""
    return {"pin": pin, "arch": arch, "commit": commit, "patchset": patchset, "image": image_id,
            "profiles": sorted(profiles)}


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
    repo: Path
    results: list[ev.ResultsFile]
    api: Any  # low-level Docker API client
    image_override: str | None = None


def pairs(matrix, arch: str | None, pin: str | None) -> list[tuple[str, str]]:
    """(arch, pin) pairs of the matrix, filtered; BadInput for unknown names."""
    if arch is not None:
        matrix.arch(arch)
    if pin is not None:
        matrix.pin(pin)
    out = []
    for a, cfg in matrix.arches.items():
        for p in cfg.pins or list(matrix.pins):
            if arch in (None, a) and pin in (None, p):
                out.append((a, p))
    if arch is not None and pin is not None and not out:
        from forgepatch.errors import BadInput

        raise BadInput(f"--pin: {pin!r} is not built for {arch} (arches.{arch}.pins in matrix.toml)")
    return out


def required_profiles(matrix, arch: str, pin: str) -> list[str]:
    """Profiles smoke runs for (arch, pin) — arches.<a>.profiles minus [[smoke.exclude]]
    plus [[smoke.include]] — that are ``required`` for a release."""
    cfg = matrix.arches[arch]
    chosen = [p for p in cfg.profiles if (cfg.pins is None or pin in cfg.pins)]
    chosen = [p for p in chosen if not any(r.matches(arch, pin, p) for r in matrix.smoke.exclude)]
    for rule in matrix.smoke.include:
        chosen += [p for p in matrix.profiles if rule.matches(arch, pin, p) and p not in chosen]
    return [p for p in chosen if matrix.profiles[p].required]


def current_patchset(matrix, patches_dir: Path, arch: str) -> str:
    from forgepatch.patching.series import load_series

    return load_series(matrix, arch, patches_dir).hash


def evaluate(inp: Inputs, arch: str, pin: str) -> Evaluation:
    out = Evaluation(arch, pin)
    matrix = inp.matrix
    jobs = [(f, j) for f in inp.results for j in f.jobs if j["arch"] == arch and j["pin"] == pin]
    out.tested = bool(jobs)
    required = required_profiles(matrix, arch, pin)
    if not required:
        out.reasons.append(Reason("no-required-profiles", f"no required smoke profile is configured for {arch} on {pin}"))
        return out

    patchset = current_patchset(matrix, inp.patches_dir, arch)
    name = ev.branch_name(arch, pin)
    br = ev.branch(inp.repo, name)
    if br is None:
        out.reasons.append(Reason("no-branch", f"no fork branch {name} in {inp.repo} (run `forgepatch fork --arch {arch} --pin {pin}`)"))
    else:
        made_with = br.trailers.get(ev.TRAILER_PATCHSET)
        if made_with is None and matrix.arches[arch].patches:
            out.reasons.append(Reason("patchset-changed", f"branch {name} head {br.head[:12]} has no {ev.TRAILER_PATCHSET} trailer (not made by `forgepatch fork`); re-run fork"))
        elif made_with is not None and made_with != patchset:
            out.reasons.append(Reason("patchset-changed", f"patchset changed since branch {name} was made: it was made with patchset {made_with}, the patch files now hash to {patchset} (re-run `forgepatch fork`)"))
        elif br.trailers.get(ev.TRAILER_ARCH, arch) != arch:
            out.reasons.append(Reason("patchset-changed", f"branch {name} carries patches for {br.trailers[ev.TRAILER_ARCH]}, not {arch}"))

    image = ev.current_image(inp.api, matrix.smoke.image_repo, arch, pin, inp.image_override)
    if image is None:
        out.reasons.append(Reason("no-image", f"no image labelled {arch}/{pin} in the Docker engine (run `forgepatch build --arch {arch} --pin {pin}`)"))
    else:
        built_with = image.labels.get(ev.LABEL_PATCHSET)
        if built_with != patchset:
            out.reasons.append(Reason("image-patchset", f"image {image.ref or image.id[:19]} was built with patchset {built_with or '(none)'}, the patch files now hash to {patchset} (rebuild it)"))
        upstream = br.trailers.get(ev.TRAILER_UPSTREAM) if br else None
        revision = image.labels.get(ev.LABEL_REVISION, "")
        if upstream and len(revision) == 40 and len(upstream) == 40 and revision != upstream:
            out.reasons.append(Reason("image-upstream", f"image {image.ref or image.id[:19]} was built from upstream {revision[:12]}, branch {name} is on {upstream[:12]}"))

    profiles: dict[str, dict[str, Any]] = {}
    used: dict[str, ev.ResultsFile] = {}
    for prof in required:
        mine = [(f, j) for f, j in jobs if j["profile"] == prof]
        if not mine:
            where = ", ".join(str(f.path) for f in inp.results) or "no results file"
            out.reasons.append(Reason("missing-results", f"no smoke results for required profile {prof} ({where})", prof))
            continue
        if image is None:
            continue
        reason, record = _judge_profile(prof, mine, image, patchset)
        if reason:
            out.reasons.append(reason)
        else:
            profiles[prof] = record
            used[record["results"]] = next(f for f, j in mine if f.sha256 == record["results"])
    if not out.reasons and br is not None and image is not None:
        out.combination = Combination(pin, arch, name, br.head, br.trailers.get(ev.TRAILER_UPSTREAM), patchset, image,
                                      profiles, list(used.values()))
    return out


def _newest(rows):
    return max(rows, key=lambda fj: (ev.parse_time(fj[1].get("finished_at")) or ev.parse_time("1970-01-01T00:00:00Z")))


def _judge_profile(prof: str, mine, image: ev.ImageFacts, patchset: str) -> tuple[Reason | None, dict[str, Any]]:
    """The newest run of ``prof`` on exactly this image decides; else say why none counts."""
    on_image = [(f, j) for f, j in mine if j.get("image_id") == image.id]
    if not on_image:
        f, j = _newest(mine)
        when = ev.parse_time(j.get("finished_at"))
        if not j.get("image_id"):
            return Reason("results-incomplete", f"smoke results for {prof} ({f.path}) do not record the image id they ran on (re-run `forgepatch smoke` with the docker runner)", prof), {}
        if when is None or when < image.created:
            return Reason("stale-results", f"stale results for {prof}: they ran on image {j['image_id'][:19]}"
                          f"{' at ' + ev.iso(when) if when else ''}; image {image.ref or image.id[:19]} ({image.id[:19]}) was rebuilt since, at {ev.iso(image.created)} (re-run `forgepatch smoke`)", prof), {}
        return Reason("other-image", f"smoke results for {prof} are for image {j['image_id'][:19]}, not the current image {image.id[:19]}", prof), {}
    f, j = _newest(on_image)
    when = ev.parse_time(j.get("finished_at"))
    if when is None:
        return Reason("results-incomplete", f"smoke results for {prof} ({f.path}) do not record when they ran (finished_at)", prof), {}
    if when < image.created:
        return Reason("stale-results", f"stale results for {prof}: they finished at {ev.iso(when)}, before image {image.id[:19]} was created at {ev.iso(image.created)}", prof), {}
    if j.get("patchset") != patchset:
        got = j.get("patchset")
        return Reason("results-incomplete" if not got else "patchset-changed",
                      f"smoke results for {prof} record patchset {got or '(none)'}, the patch files now hash to {patchset}", prof), {}
    if j["status"] != "pass":
        sig = j.get("signature")
        what = j.get("label") or j.get("summary") or j["status"]
        where = f" in {j['failing_phase']}" if j.get("failing_phase") else ""
        return Reason("failing-profile", f"profile {prof} {'failed' if j['status'] == 'fail' else j['status']}: {what}"
                      f"{f' [{sig}]' if sig else ''}{where} (job {j.get('id', '?')}, {f.path})", prof), {}
    record = {"status": "pass", "job": j.get("id"), "finished_at": j.get("finished_at"), "image_id": j["image_id"],
              "patchset": j["patchset"], "results": f.sha256}
    return None, record
