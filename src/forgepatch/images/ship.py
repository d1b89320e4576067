"""After ``build``: the kernel audit of the image, the push of its content-addressed tag and
the build record (``combination.records``) — what carries an image from the build host to
the GPU host. Called by ``forgepatch build`` in that order; a failed audit stops before the
push (nothing leaves the build host) and before the record is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from forgepatch.combination import LABEL, packages_of_labels
from forgepatch.combination.records import AuditSummary, Build, BuildRecord, PackageBuild
from forgepatch.infra.refs import ImageRef, is_digest_ref, parse, split_tag
from forgepatch.errors import BadInput, Failure
from forgepatch import utctime
from forgepatch.images.audit import audit_image
from forgepatch.images.build import BuildResult, base_image_id, find_cached
from forgepatch.images.platforms import image_platform
from forgepatch.infra import registry

Event = Callable[[str, dict[str, Any]], None]


def push_repo(repo: str) -> ImageRef:
    """The registry repository ``[smoke] image_repo`` names (BadInput when malformed)."""
    return parse(repo, "[smoke] image_repo")


def preflight_push(repo: str) -> ImageRef:
    """Before anything is built: the image repo parses, its registry answers and takes the
    Docker config's credentials (BadInput, one line, otherwise)."""
    ref = push_repo(repo)
    try:
        registry.check_access(ref)
    except BadInput as exc:
        if ref.registry is None:  # the default image_repo: Docker Hub is rarely what was meant
            raise BadInput(f"{exc}; [smoke] image_repo {repo!r} names Docker Hub: set it to your registry's "
                           "repository (e.g. ghcr.io/ORG/sglang)") from None
        raise
    return ref


def audit(api, result, arch, strict: bool = False, on_event: Event | None = None) -> AuditSummary:
    """The kernel audit of the built image for its arch (``images.audit``)."""
    report = audit_image(result.image_id, arch, strict, on_event, api=api)
    return AuditSummary.of(report)


def audit_failure(summary: AuditSummary, ref: str) -> Failure:
    n = len(summary.failing)
    what = []
    if n:
        what.append(f"{n} CUDA librar{'y has' if n == 1 else 'ies have'} no code for "
                    f"{summary.arch}: {', '.join(summary.failing[:5])}{' ...' if n > 5 else ''}")
    if summary.jit is not None and (summary.jit.unverified or (summary.strict and summary.jit.rejecting)):
        named = summary.jit.unverified or summary.jit.rejecting
        what.append(f"{summary.jit.package} JIT lists {summary.jit.status} for {summary.arch}: {', '.join(named[:3])}"
                    f"{' ...' if len(named) > 3 else ''}")
    if not what and summary.jit is not None:  # found twice, or installed but not read where it is
        what.append(f"{summary.jit.package} JIT lists {summary.jit.status} (not read where python3 imports it)")
    return Failure(f"kernel audit of {ref}: {'; '.join(what)} "
                   f"(`forgepatch audit --arch {summary.arch} --image {ref}` lists what they have); not pushed")


def registry_hit(api, spec):
    """``build --push`` on a host without this content (a fresh CI runner): when the registry
    has the content tag with the same content hash on the same base (labels read from its
    config, nothing pulled), the build result is that image and nothing is built or pushed.
    None when the engine has the image (the local cache decides) or the registry lacks it."""
    import time

    started = time.perf_counter()
    base_id = base_image_id(api, spec.base_image)
    if find_cached(api, spec, base_id):
        return None
    found = registry.remote_image(parse(spec.tag, "push"))
    if found is None:
        return None
    labels = found.labels
    if labels.get(LABEL["context_hash"]) != spec.content_hash or labels.get(LABEL["base_image_id"]) != base_id:
        return None
    seconds = time.perf_counter() - started

    return BuildResult(found.image_id, [spec.tag, spec.moving_tag], spec.content_hash, True, seconds, spec.arch.name,
                       spec.pin, spec.base_image, labels, [], None, spec.context.root, digest=found.digest_ref,
                       uploaded=False, push_seconds=seconds, registry_hit=True,
                       platform=image_platform(api.inspect_image(base_id)))  # built FROM that base: its platform


def fetch(api, result, on_event: Event | None = None) -> None:
    """Pull a registry hit by digest and give it its local tags (for the audit, which reads
    the image through this engine)."""
    image_id = registry.pull(api, parse(result.digest, "digest"), on_event)
    if image_id != result.image_id:
        raise Failure(f"pulled {result.digest} as image {image_id[:19]}, the registry's config says {result.image_id[:19]}")
    for ref in result.tags:
        name, tag = split_tag(ref)
        api.tag(image_id, name, tag, force=True)


def push(api, result, on_event: Event | None = None):
    """Push the content-addressed tag (a remote no-op when the registry has that content)."""
    base_id = result.labels.get(LABEL["base_image_id"])
    same = {LABEL["context_hash"]: result.content_hash, LABEL["base_image_id"]: base_id}
    return registry.push(api, result.image_id, result.tags[0], same, on_event)


def record(path: Path, result, audit: AuditSummary | None) -> Build:
    """Write (or update) the build record at ``path`` with this build."""
    book = BuildRecord.load(path, missing_ok=True)
    labels = result.labels
    build = Build(
        arch=result.arch, pin=result.pin, image_id=result.image_id, tag=result.tags[0],
        content_hash=result.content_hash, digest=result.digest, uploaded=result.uploaded,
        patchset=labels.get(LABEL["patchset"]), upstream=labels.get(LABEL["upstream"]),
        engine=labels.get(LABEL["engine"]), base_image=result.base_image, audit=audit,
        built_at=utctime.iso_seconds(),
        packages=[PackageBuild.of(p) for p in packages_of_labels(labels).values()],
        platform=result.platform,
    )
    book.put(build)
    book.write(path)
    return build


def moving_base(api, base_image: str) -> str | None:
    """A warning when the base image is named by a tag although it came from a registry (it
    has a registry digest): the same pin and patches may build on other bytes tomorrow. A
    base made locally (no registry digest) has nothing to pin."""
    if is_digest_ref(base_image):
        return None
    try:
        digests = api.inspect_image(base_image).get("RepoDigests") or []
    except Exception:  # noqa: BLE001 - base_image_id reports a missing base
        return None
    if not digests:
        return None
    return (f"base image {base_image} is a moving tag (now {digests[0]}); pin it by digest: "
            f"`forgepatch pin base ARCH` records repo@sha256:... in matrix.toml")


def check_record_path(path: Path) -> None:
    """BadInput before building when ``--record`` names an unusable file."""
    if path.exists():
        BuildRecord.load(path)
    elif not path.parent.exists():
        raise BadInput(f"--record: directory {path.parent} does not exist")
