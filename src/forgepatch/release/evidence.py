"""The facts a release decision rests on, read from where they live: smoke results files
(the ``combination.results`` schema), the fork branch and tags in git (``fork.gitrepo``), and
the image in the Docker engine. Nothing here writes, except the small docker writers at the end."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from forgepatch.combination import LABEL, Trailer, Upstream, content_ref, image_ref, validated_ref
from forgepatch.combination.ledger import ImageRecord
from forgepatch.combination.results import JobResult, SmokeResults
from forgepatch.errors import BadInput, Failure
from forgepatch.infra import registry
from forgepatch.infra.dockerapi import api, repo_digest
from forgepatch.infra.gitrepo import GitRepo, parse_trailers
from forgepatch.infra.refs import is_digest_ref, parse_digest_ref, repository, split_tag
from forgepatch.release.ledger import sha256_bytes
from forgepatch.utctime import EPOCH, iso, parse as parse_time  # noqa: F401  (release reads times through ev.)


# -- smoke results -----------------------------------------------------------------------------
@dataclass
class ResultsFile:
    path: Path
    data: bytes
    sha256: str
    doc: SmokeResults

    @property
    def jobs(self) -> list[JobResult]:
        return self.doc.jobs


def parse_results(path: Path, data: bytes) -> ResultsFile:
    """A ``forgepatch smoke --json`` (or ``results merge``) document; BadInput when it is not one."""
    return ResultsFile(Path(path), data, sha256_bytes(data), SmokeResults.parse(path, data))


def load_results(paths: list[Path]) -> list[ResultsFile]:
    out = []
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise BadInput(f"--results: cannot read {path}: {exc.strerror}") from None
        out.append(parse_results(Path(path), data))
    return out


# -- git -----------------------------------------------------------------------------------------
def open_repo(path: Path, flag: str = "--repo") -> GitRepo:
    """The fork's repository (``--repo``), or a package's checkout (``flag`` names its matrix
    key); BadInput when it is not one."""
    return GitRepo(Path(path), flag)


@dataclass
class BranchFacts:
    name: str
    head: str
    trailers: dict[str, str]
    ref: str = ""  # where it was read: refs/heads/NAME or refs/remotes/<remote>/NAME


def branch(repo: GitRepo, name: str) -> BranchFacts | None:
    """The fork branch ``name``: the local branch, else its remote-tracking branch
    (``origin/NAME`` first; ``GitRepo.branch_ref``), as a CI checkout has it."""
    ref = repo.branch_ref(name)
    head = repo.ref(ref) if ref else None
    if head is None:
        return None
    return BranchFacts(name, head, parse_trailers(repo.message(head)), ref)


def fetch_hint(name: str) -> str:
    """How to get a fork branch a checkout lacks (CI checkouts fetch one branch)."""
    return f"git fetch origin '+refs/heads/{name}:refs/remotes/origin/{name}'"


def branch_upstream(repo: GitRepo, br: BranchFacts, package_dir: str) -> Upstream | None:
    """The upstream code a fork branch was made from: its trailers (``forgepatch fork``), the
    version read from the upstream commit when an older fork did not record it."""
    sha = br.trailers.get(Trailer.UPSTREAM)
    if not sha:
        return None
    version = br.trailers.get(Trailer.UPSTREAM_VERSION)
    if version is None:
        try:
            version = repo.tree(sha, package_dir).version()
        except BadInput:
            version = None
    return Upstream("git", version, sha)


def check_tag_name(repo: GitRepo, name: str) -> None:
    if not repo.valid_ref(f"refs/tags/{name}"):
        raise BadInput(f"[release] tag_template gives {name!r}, not a valid git tag name")


# -- docker --------------------------------------------------------------------------------------
def docker_api():
    """The low-level Docker API client (``forgepatch.infra.dockerapi``)."""
    return api()


@dataclass
class ImageFacts:
    id: str
    created: datetime
    labels: dict[str, str]
    repo_tags: list[str]
    ref: str | None  # the content-addressed tag <repo>:<pin>-<arch>-<hash12>, if it still names this image
    digest_ref: str | None = None  # its registry reference repo@sha256:..., when it has one
    repo_digests: list[str] | None = None
    local: bool = True  # False: known from the registry only (not in this engine)

    @property
    def upstream(self) -> Upstream | None:
        return Upstream.from_labels(self.labels)

    def record(self, validated: str | None = None, registry_tags: list[str] | None = None) -> ImageRecord:
        """The image as a ledger entry records it (``validated``: the tag the release sets,
        left out of ``tags``; ``registry_tags``: the registry tags it promoted)."""
        return ImageRecord(id=self.id, digest_ref=self.digest_ref, ref=self.ref, created=iso(self.created),
                           tags=[t for t in self.repo_tags if t != validated], patchset=self.labels.get(LABEL["patchset"]),
                           upstream=self.labels.get(LABEL["upstream"]), upstream_version=self.labels.get(LABEL["version"]),
                           upstream_revision=self.labels.get(LABEL["revision"]), engine=self.labels.get(LABEL["engine"]),
                           context_hash=self.labels.get(LABEL["context_hash"]), validated=validated,
                           registry_tags=registry_tags)

    def to_json(self) -> dict[str, Any]:
        return self.record().model_dump(mode="json", by_alias=True, exclude={"validated"})


def inspect_image(api, ref: str) -> ImageFacts | None:
    from docker.errors import ImageNotFound, NotFound

    try:
        doc = api.inspect_image(ref)
    except (ImageNotFound, NotFound):
        return None

    labels = (doc.get("Config") or {}).get("Labels") or {}
    created = parse_time(doc.get("Created")) or EPOCH
    return ImageFacts(doc["Id"], created, dict(labels), list(doc.get("RepoTags") or []), None, repo_digest(doc),
                      list(doc.get("RepoDigests") or []))


def remote_image(digest: str, what: str = "--image") -> ImageFacts | None:
    """An image known from the registry only (its manifest and config; nothing pulled): its
    ID is the config digest, as the engine would name it once pulled."""
    found = registry.remote_image(parse_digest_ref(digest, what))
    if found is None:
        return None
    created = parse_time(found.created) or EPOCH
    return ImageFacts(found.image_id, created, found.labels, [], None, found.digest_ref, [found.digest_ref], local=False)


def _in_repo(image: ImageFacts, repo: str) -> ImageFacts:
    """The digest that matters is the one in ``repo`` (the image may have been pushed elsewhere too)."""
    if image.local:
        image.digest_ref = next((d for d in image.repo_digests or [] if repository(d) == repo), None)
    return image


def build_ref(repo: str, pin: str, arch: str, image: ImageFacts) -> str | None:
    """The builder's tag for this image's content hash (``combination.content_ref``)."""
    chash = image.labels.get(LABEL["context_hash"])
    if chash:
        return content_ref(repo, pin, arch, chash)
    moving, validated = image_ref(repo, pin, arch), validated_ref(repo, pin, arch)
    others = [t for t in image.repo_tags if repository(t) == repo and t not in (moving, validated)]
    return others[0] if others else None


def current_image(api, repo: str, arch: str, pin: str, override: str | None = None,
                  ran_on: str | None = None) -> ImageFacts | None:
    """The image a release of (arch, pin) would publish: ``override`` if given, else the
    newest image labelled with that arch and pin that has a tag in ``repo``; when this engine
    has none, the digest the smoke jobs ran on (``ran_on``), read from the registry."""
    if override:
        image = inspect_image(api, override)
        if image is None and is_digest_ref(override):
            image = remote_image(override)
            if image is None:
                raise BadInput(f"--image: the registry has no image {override}")
        if image is None:
            raise BadInput(f"--image: {override!r} is not in the local Docker engine")
        got = (image.labels.get(LABEL["arch"]), image.labels.get(LABEL["pin"]))
        if got != (arch, pin):
            raise BadInput(f"--image: {override!r} is labelled {got[0]}/{got[1]}, not {arch}/{pin}")
        image.ref = override if override in image.repo_tags else build_ref(repo, pin, arch, image)
        return _in_repo(image, repo)
    listed = api.images(filters={"label": [f"{LABEL['arch']}={arch}", f"{LABEL['pin']}={pin}"]})
    listed = [row for row in listed if any(repository(t) == repo for t in row.get("RepoTags") or [])]
    found = [i for i in (inspect_image(api, row["Id"]) for row in listed) if i is not None]
    if not found:
        if ran_on and is_digest_ref(ran_on) and repository(ran_on) == repo:
            image = remote_image(ran_on, "smoke results image_digest")
            if image is not None and (image.labels.get(LABEL["arch"]), image.labels.get(LABEL["pin"])) == (arch, pin):
                image.ref = build_ref(repo, pin, arch, image)
                return image
        return None
    image = max(found, key=lambda i: i.created)
    image.ref = build_ref(repo, pin, arch, image)
    return _in_repo(image, repo)


def resolve_tag(api, ref: str) -> str | None:
    image = inspect_image(api, ref)
    return image.id if image else None


def set_image_tag(api, image_id: str, ref: str) -> None:
    name, tag_ = split_tag(ref)
    if not api.tag(image_id, name, tag_, force=True):
        raise Failure(f"docker tag {image_id[:19]} {ref}: the engine refused")


def remove_image_tag(api, ref: str) -> None:
    from docker.errors import APIError

    try:
        api.remove_image(ref, noprune=True)
    except APIError:
        pass
