"""The facts a release decision rests on, read from where they live: smoke results files
(``forgepatch smoke --json``), the fork branch and tags in git, and the image in the Docker
engine. Nothing here writes, except the two small git/docker writers at the end."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from forgepatch.errors import BadInput, Failure
# the fork branch and its trailers, as `forgepatch fork` writes them (re-exported for release)
from forgepatch.fork.fork import TRAILER_ARCH, TRAILER_PATCHSET, TRAILER_UPSTREAM, branch_name  # noqa: F401
from forgepatch.fork.gitrepo import GitError
from forgepatch.fork.gitrepo import git, parse_trailers
from forgepatch.images.spec import HASH_LABEL as LABEL_CONTEXT_HASH
from forgepatch.images.spec import tag_safe  # the builder's spelling of a pin in a tag
from forgepatch.release.ledger import sha256_bytes

# written by `forgepatch build` (forgepatch.images.spec): image labels
LABEL_ARCH = "forgepatch.arch"
LABEL_PIN = "forgepatch.pin"
LABEL_PATCHSET = "forgepatch.patchset"
LABEL_REVISION = "org.opencontainers.image.revision"

_IDENT = {"GIT_COMMITTER_NAME": "forgepatch", "GIT_COMMITTER_EMAIL": "forgepatch@localhost"}


def parse_time(text: str | None) -> datetime | None:
    """ISO 8601 (Docker's nanosecond ``Created`` included) -> aware UTC datetime."""
    if not text or not isinstance(text, str):
        return None
    m = re.fullmatch(r"(.*?T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:?\d\d)?", text.strip())
    if not m:
        return None
    frac = (m.group(2) or "")[:7]
    tz = m.group(3) or "+00:00"
    try:
        when = datetime.fromisoformat(m.group(1) + frac + ("+00:00" if tz == "Z" else tz))
    except ValueError:
        return None
    return when.astimezone(timezone.utc) if when.tzinfo else when.replace(tzinfo=timezone.utc)


def iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


# -- smoke results -----------------------------------------------------------------------------
@dataclass
class ResultsFile:
    path: Path
    data: bytes
    sha256: str
    jobs: list[dict[str, Any]]


def parse_results(path: Path, data: bytes) -> ResultsFile:
    """A ``forgepatch smoke --json`` document; BadInput when it is not one."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        why = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise BadInput(f"{path}: not a smoke results file ({why})") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise BadInput(f"{path}: not a smoke results file (no 'jobs' list; write it with `forgepatch smoke --json`)")
    for i, job in enumerate(jobs):
        if not isinstance(job, dict) or not all(isinstance(job.get(k), str) for k in ("arch", "pin", "profile", "status")):
            raise BadInput(f"{path}: job {i + 1} lacks arch/pin/profile/status")
    return ResultsFile(Path(path), data, sha256_bytes(data), jobs)


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
def repo_root(path: Path) -> Path:
    if not Path(path).is_dir():
        raise BadInput(f"--repo: {path} is not a directory")
    try:
        return Path(git(Path(path), "rev-parse", "--show-toplevel"))
    except GitError:
        raise BadInput(f"--repo: {path} is not a git repository") from None


@dataclass
class BranchFacts:
    name: str
    head: str
    trailers: dict[str, str]


def branch(repo: Path, name: str) -> BranchFacts | None:
    try:
        head = git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{name}^{{commit}}")
    except GitError:
        return None
    return BranchFacts(name, head, parse_trailers(git(repo, "log", "-1", "--format=%B", head)))


@dataclass
class TagFacts:
    name: str
    object: str  # the tag object (annotated) or the commit (lightweight)
    commit: str
    annotated: bool
    message: str = ""
    trailers: dict[str, str] = field(default_factory=dict)


def tag(repo: Path, name: str) -> TagFacts | None:
    ref = f"refs/tags/{name}"
    try:
        obj = git(repo, "rev-parse", "--verify", "--quiet", ref)
    except GitError:
        return None
    kind = git(repo, "cat-file", "-t", obj)
    commit = git(repo, "rev-parse", f"{ref}^{{commit}}")
    if kind != "tag":
        return TagFacts(name, obj, commit, False)
    message = git(repo, "for-each-ref", "--format=%(contents)", ref)
    return TagFacts(name, obj, commit, True, message, parse_trailers(message))


def check_tag_name(repo: Path, name: str) -> None:
    try:
        git(repo, "check-ref-format", f"refs/tags/{name}")
    except GitError:
        raise BadInput(f"[release] tag_template gives {name!r}, not a valid git tag name") from None


def create_tag(repo: Path, name: str, commit: str, message: str) -> TagFacts | None:
    """Create the annotated tag; None when it already exists (another release won)."""
    try:
        git(repo, "config", "user.email")
        env = None
    except GitError:
        env = dict(_IDENT)
    try:
        git(repo, "-c", "tag.gpgSign=false", "tag", "-a", "-F", "-", "--", name, commit, input=message.encode(), env=env)
    except GitError as exc:
        if "already exists" in str(exc):
            return None
        raise Failure(f"git tag {name}: {exc}") from None
    return tag(repo, name)


def delete_created_tag(repo: Path, facts: TagFacts) -> None:
    """Roll back a tag this run created (compare-and-delete: only if it is still ours)."""
    try:
        git(repo, "update-ref", "-d", f"refs/tags/{facts.name}", facts.object)
    except GitError:
        pass


# -- docker --------------------------------------------------------------------------------------
def docker_api():
    """The low-level Docker API client; BadInput when no engine answers."""
    try:
        import docker
    except ImportError:  # pragma: no cover - docker is a dependency
        raise BadInput("the docker Python SDK is missing: pip install docker") from None
    try:
        client = docker.from_env(version="auto")
        client.ping()
    except Exception as exc:
        host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        raise BadInput(f"cannot reach the Docker engine at {host} ({type(exc).__name__}); start it or set DOCKER_HOST") from None
    return client.api


@dataclass
class ImageFacts:
    id: str
    created: datetime
    labels: dict[str, str]
    repo_tags: list[str]
    ref: str | None  # the content-addressed tag <repo>:<pin>-<arch>-<hash12>, if it still names this image

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "ref": self.ref, "created": iso(self.created), "tags": self.repo_tags,
                "patchset": self.labels.get(LABEL_PATCHSET), "context_hash": self.labels.get(LABEL_CONTEXT_HASH)}


def inspect_image(api, ref: str) -> ImageFacts | None:
    from docker.errors import ImageNotFound, NotFound

    try:
        doc = api.inspect_image(ref)
    except (ImageNotFound, NotFound):
        return None
    labels = (doc.get("Config") or {}).get("Labels") or {}
    created = parse_time(doc.get("Created")) or datetime.fromtimestamp(0, timezone.utc)
    return ImageFacts(doc["Id"], created, dict(labels), list(doc.get("RepoTags") or []), None)


def content_ref(repo: str, pin: str, arch: str, image: ImageFacts) -> str | None:
    """The builder's tag for this image's content hash, when it still names this image."""
    chash = image.labels.get(LABEL_CONTEXT_HASH)
    want = f"{repo}:{tag_safe(pin)}-{arch}-{chash[:12]}" if chash else None
    if want and want in image.repo_tags:
        return want
    others = [t for t in image.repo_tags if t.startswith(f"{repo}:") and not t.endswith(("-validated", f"-{arch}"))]
    return want if want else (others[0] if others else None)


def current_image(api, repo: str, arch: str, pin: str, override: str | None = None) -> ImageFacts | None:
    """The image a release of (arch, pin) would publish: ``override`` if given, else the
    newest image labelled with that arch and pin that has a tag in ``repo``."""
    if override:
        image = inspect_image(api, override)
        if image is None:
            raise BadInput(f"--image: {override!r} is not in the local Docker engine")
        if (image.labels.get(LABEL_ARCH), image.labels.get(LABEL_PIN)) != (arch, pin):
            raise BadInput(f"--image: {override!r} is labelled {image.labels.get(LABEL_ARCH)}/{image.labels.get(LABEL_PIN)}, not {arch}/{pin}")
        image.ref = override if override in image.repo_tags else content_ref(repo, pin, arch, image)
        return image
    listed = api.images(filters={"label": [f"{LABEL_ARCH}={arch}", f"{LABEL_PIN}={pin}"]})
    listed = [row for row in listed if any(t.startswith(f"{repo}:") for t in row.get("RepoTags") or [])]
    found = [i for i in (inspect_image(api, row["Id"]) for row in listed) if i is not None]
    if not found:
        return None
    image = max(found, key=lambda i: i.created)
    image.ref = content_ref(repo, pin, arch, image)
    return image


def validated_tag(repo: str, pin: str, arch: str) -> str:
    return f"{repo}:{tag_safe(pin)}-{arch}-validated"


def resolve_tag(api, ref: str) -> str | None:
    image = inspect_image(api, ref)
    return image.id if image else None


def set_image_tag(api, image_id: str, ref: str) -> None:
    name, _, tag_ = ref.rpartition(":")
    if not api.tag(image_id, name, tag_, force=True):
        raise Failure(f"docker tag {image_id[:19]} {ref}: the engine refused")


def remove_image_tag(api, ref: str) -> None:
    from docker.errors import APIError

    try:
        api.remove_image(ref, noprune=True)
    except APIError:
        pass
