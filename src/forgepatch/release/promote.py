"""Releases in the registry: the validated digest gets the tags ``<pin>-<arch>-validated``
and the release tag (``combination.release_image_tag``) in its own repository, by a manifest
PUT of the same manifest — no layer, no config is uploaded, nothing is rebuilt. ``verify``
reads them back: each tag must still resolve to the recorded digest (a moved tag is reported
with both digests) and the image's labels, read from the registry, must match the ledger.

Only a combination with a registry digest (from the smoke results or the image's own
``RepoDigests`` in ``smoke.image_repo``) is promoted; an image repo that names a registry
requires one (push it first), a local-only image repo keeps the local ``validated`` tag only.
"""

from __future__ import annotations

from dataclasses import dataclass

from forgepatch.combination import LABEL, image_tag, release_image_tag
from forgepatch.combination.ledger import LedgerEntry
from forgepatch.infra import registry
from forgepatch.infra.refs import ImageRef, parse, parse_digest_ref


@dataclass
class Promotion:
    digest_ref: str  # repo@sha256:...
    tags: list[str]  # the registry tags the release names (validated first)

    @property
    def ref(self) -> ImageRef:
        return parse_digest_ref(self.digest_ref, "image digest")

    def refs(self) -> list[str]:
        return [f"{self.ref.name}:{t}" for t in self.tags]


def needs_registry(image_repo: str) -> bool:
    """An image repo that names a registry (``ghcr.io/org/x``, ``127.0.0.1:5000/x``)."""
    try:
        return parse(image_repo, "[smoke] image_repo").registry is not None
    except Exception:  # noqa: BLE001 - a malformed repo is reported where it is used
        return False


def plan(digest: str, pin: str, arch: str, tag: str) -> Promotion:
    return Promotion(digest, [image_tag(pin, arch, "validated"), release_image_tag(tag)])


def problems(promo: Promotion, image_id: str) -> list[str]:
    """Why the registry cannot take this release (empty: it can): the digest is missing or
    names another image, or the release tag already names another digest (release tags
    never move; the validated tag follows the newest release)."""
    ref = promo.ref
    found = registry.remote_image(ref)
    if found is None:
        return [f"registry {ref.host} has no image {promo.digest_ref} (push it: `forgepatch build --push`)"]
    if image_id and found.image_id != image_id:
        return [f"{promo.digest_ref} is image {found.image_id[:19]} in the registry, the release validated {image_id[:19]}"]
    out = []
    reg = registry.Registry(ref)
    now = reg.head(ref.with_tag(promo.tags[1]))
    if now is not None and now != ref.digest:
        out.append(f"registry tag {ref.name}:{promo.tags[1]} already names {now}, not {ref.digest}; release tags never move")
    return out


def promote(promo: Promotion) -> dict[str, str | None]:
    """Point the tags at the digest (manifest PUT, no blob upload); what they named before."""
    return registry.tag_remote(promo.ref, promo.tags)


def check(entry: LedgerEntry, newest: bool) -> list[tuple[bool, str]]:
    """(ok, detail) per registry fact of a ledger entry: each tag resolves to the recorded
    digest (the validated tag only for the newest release), the image there carries the
    recorded arch, pin and patchset and is the recorded image."""
    rec = entry.image
    digest = rec.digest_ref
    tags = rec.registry_tags or []
    if not digest or not tags:
        return []
    ref = parse_digest_ref(digest, "ledger image digest")
    reg = registry.Registry(ref)
    out: list[tuple[bool, str]] = []
    for i, full in enumerate(tags):
        if i == 0 and not newest:
            continue
        tagged = parse(full, "ledger registry tag")
        now = reg.head(tagged)
        out.append((now == ref.digest, f"registry tag {full} moved: it names {now or 'nothing'}, the release recorded {ref.digest}"))
    found = registry.remote_image(ref)
    if found is None:
        out.append((False, f"registry {ref.host} no longer has {digest}"))
        return out
    out.append((found.image_id == rec.id, f"{digest} is image {found.image_id[:19]}, the ledger recorded {str(rec.id)[:19]}"))
    for key, want in ((LABEL["arch"], entry.arch), (LABEL["pin"], entry.pin), (LABEL["patchset"], entry.patchset)):
        out.append((found.labels.get(key) == want, f"{digest} has label {key}={found.labels.get(key)!r} in the registry, the ledger recorded {want!r}"))
    return out
