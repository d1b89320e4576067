"""``smoke --builds FILE``: the image each job runs, named by what built it.

Two documents name built images:

- a build record (``forgepatch build --push --record FILE``, ``combination.records``): each
  arch x pin's pushed digest, as the build saw it;
- a bake file (``forgepatch bake``, then ``docker buildx bake -f FILE --push`` on any builder,
  ``combination.bakefile``): each target's content-addressed tag. The registry says which
  image the tag names now, and the image is taken only when its labels carry every label the
  target declares (same content hash, arch, pin, patchset, packages): a tag that names other
  content (pushed over by hand, or a target that was never pushed) is bad input, one line,
  never a silent run of another image.
"""

from __future__ import annotations

import json
from pathlib import Path

from forgepatch.combination import LABEL, packages_of_labels
from forgepatch.combination import bakefile
from forgepatch.combination.records import Build, BuildRecord, PackageBuild
from forgepatch.errors import BadInput, Failure
from forgepatch.infra import registry
from forgepatch.infra.refs import parse, parse_digest_ref


def load_builds(paths: list[Path]) -> BuildRecord:
    """Every build the files name, as one record (a later file's entry for an arch x pin wins)."""
    out = BuildRecord()
    for path in paths:
        data = _read(path)
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            doc = None  # the record reader says why, naming the line
        builds = bake_builds(path, bakefile.parse(path, doc)) if bakefile.is_bake_document(doc) \
            else BuildRecord.parse(path, data).builds
        for build in builds:
            out.put(build)
    return out


def bake_builds(path: Path, bake: bakefile.BakeFile) -> list[Build]:
    """The image each target of ``bake`` pushed, read from the registry (nothing pulled)."""
    out = []
    for name, target in bake.target.items():
        where = f"{path}: target {name!r}"
        ref = parse(target.content_tag, f"{where} tag")
        try:
            found = registry.remote_image(ref, platform=target.platform)
        except Failure as exc:
            raise BadInput(f"{where}: {exc}") from None
        if found is None:
            raise BadInput(f"{where}: the registry has no {target.content_tag} (was the bake pushed? "
                           f"`docker buildx bake -f {path} --push`)")
        wrong = sorted(k for k, v in target.labels.items() if found.labels.get(k) != v)
        if wrong:
            raise BadInput(f"{where}: {target.content_tag} names {found.digest_ref}, whose label {wrong[0]} is "
                           f"{found.labels.get(wrong[0])!r}, not the target's {target.labels[wrong[0]]!r}: it is "
                           "not this target's image (rebuild and push the bake)")
        labels = found.labels
        out.append(Build(
            arch=labels[LABEL["arch"]], pin=labels[LABEL["pin"]], image_id=found.image_id, tag=target.content_tag,
            content_hash=labels[LABEL["context_hash"]], digest=found.digest_ref, uploaded=False,
            patchset=labels.get(LABEL["patchset"]), upstream=labels.get(LABEL["upstream"]),
            engine=labels.get(LABEL["engine"]), base_image=target.args.get("BASE_IMAGE"), audit=None,
            built_at=found.created,
            packages=[PackageBuild.of(p) for p in packages_of_labels(labels).values()],
            platform=target.platform or "linux/amd64",
        ))
    return out


def use_builds(specs, paths: list[Path]) -> None:
    """Each job runs the digest its build record or bake file names for its arch x pin
    (BadInput, one line, when a file lacks the pair, was not pushed, or holds a tag where a
    digest belongs)."""
    records = load_builds(list(paths))
    where = ", ".join(str(p) for p in paths)
    for spec in specs:
        build = records.find(spec.arch, spec.pin)
        if build is None:
            raise BadInput(f"--builds: {where} has no build of {spec.arch}/{spec.pin} (job {spec.id})")
        if not build.digest:
            raise BadInput(f"--builds: the build of {spec.arch}/{spec.pin} in {where} was not pushed "
                           f"({build.tag}); `forgepatch build --push --record` it")
        parse_digest_ref(build.digest, f"--builds ({spec.arch}/{spec.pin} digest)")
        spec.image = build.digest
        spec.audit = build.audit


def _read(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{path}: no such build record or bake file") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read it: {exc.strerror}") from None
