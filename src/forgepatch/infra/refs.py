"""Image references, parsed in one place: ``[REGISTRY/]PATH[:TAG][@sha256:DIGEST]``.

Docker's rules: the first path component names a registry when it has a ``.`` or a ``:`` or
is ``localhost``; otherwise the image lives on Docker Hub (``docker.io``, one-component
names under ``library/``). A tag is ``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}``; a digest is
``sha256:`` and 64 hex digits. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from forgepatch.errors import BadInput

HUB = "docker.io"
HUB_API = "registry-1.docker.io"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_HOST = re.compile(r"[A-Za-z0-9.-]+(?::\d+)?|\[[0-9a-fA-F:]+\](?::\d+)?")
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")


@dataclass(frozen=True)
class ImageRef:
    """A parsed reference. ``registry`` is None for Docker Hub; ``path`` is the repository
    path as written (``forgepatch/sglang``)."""

    registry: str | None
    path: str
    tag: str | None = None
    digest: str | None = None

    # -- names ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """``[REGISTRY/]PATH``: the repository as Docker spells it (no tag, no digest)."""
        return f"{self.registry}/{self.path}" if self.registry else self.path

    @property
    def host(self) -> str:
        """The registry's address for the distribution API."""
        return self.registry or HUB_API

    @property
    def api_path(self) -> str:
        """The repository path in the distribution API (``library/x`` for an official image)."""
        return f"library/{self.path}" if self.registry is None and "/" not in self.path else self.path

    @property
    def auth_key(self) -> str:
        """The registry as Docker's config file keys it (Docker Hub: its index URL)."""
        return self.registry or "https://index.docker.io/v1/"

    @property
    def loopback(self) -> bool:
        """127.0.0.1 / localhost registries: plain HTTP, no daemon configuration."""
        host = (self.registry or "").rsplit(":", 1)[0] if not (self.registry or "").startswith("[") else \
            (self.registry or "").split("]")[0] + "]"
        return host in LOOPBACK

    @property
    def reference(self) -> str:
        """What the distribution API's ``manifests/<reference>`` takes: the digest, else the tag."""
        return self.digest or self.tag or "latest"

    def with_tag(self, tag: str) -> "ImageRef":
        check_tag(tag, "tag")
        return replace(self, tag=tag, digest=None)

    def with_digest(self, digest: str) -> "ImageRef":
        if not DIGEST.fullmatch(digest):
            raise BadInput(f"{digest!r} is not a sha256 digest")
        return replace(self, tag=None, digest=digest)

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def check_tag(tag: str, what: str) -> None:
    if not TAG.fullmatch(tag):
        raise BadInput(f"{what}: {tag!r} is not a valid image tag ([A-Za-z0-9_.-], at most 128, not starting with '.' or '-')")


def parse(ref: str, what: str = "image") -> ImageRef:
    """BadInput (naming ``what``: the flag or key) when ``ref`` is not an image reference."""
    text = ref.strip()
    digest = None
    if "@" in text:
        text, _, digest = text.partition("@")
        if not DIGEST.fullmatch(digest):
            raise BadInput(f"{what}: {ref!r} has a malformed digest (want sha256: and 64 lowercase hex digits)")
    tag = None
    last = text.rsplit("/", 1)[-1]
    if ":" in last:
        text, _, tag = text.rpartition(":")
        check_tag(tag, what)
    first, slash, rest = text.partition("/")
    registry = None
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        if not _HOST.fullmatch(first):
            raise BadInput(f"{what}: {ref!r} has a malformed registry {first!r}")
        registry, text = first, rest
    if registry == HUB or registry == "index.docker.io":
        registry = None
    if not text or not all(_COMPONENT.fullmatch(part) for part in text.split("/")):
        raise BadInput(f"{what}: {ref!r} is not an image reference ([REGISTRY/]NAME[:TAG][@sha256:DIGEST], "
                       "lowercase name components)")
    return ImageRef(registry, text, tag, digest)


def parse_digest_ref(ref: str, what: str) -> ImageRef:
    """A reference that must carry a digest (``repo@sha256:...``): a tag moves, a digest
    does not. BadInput otherwise."""
    parsed = parse(ref, what)
    if parsed.digest is None:
        raise BadInput(f"{what}: {ref!r} is a tag, not a digest; give REPO@sha256:... "
                       "(`forgepatch build --push --json` prints it, the build record holds it)")
    return parsed


def is_digest_ref(ref: str) -> bool:
    """``repo@sha256:<64 hex>`` (cheap, no validation of the repo part)."""
    _, at, digest = ref.partition("@")
    return bool(at) and bool(DIGEST.fullmatch(digest))


# -- references Docker or a document already holds: split, not validated -----------------------

def split(ref: str) -> tuple[str, str | None, str | None]:
    """``[REGISTRY/]PATH[:TAG][@DIGEST]`` -> (repository, tag, digest), a registry port's
    colon kept in the repository. For references the engine, a registry or a forgepatch
    document handed over (``parse`` checks what a user typed)."""
    name, at, digest = ref.partition("@")
    head, colon, tag = name.rpartition(":")
    if colon and "/" not in tag:
        name = head
    else:
        tag = ""
    return name, tag or None, (digest if at else None) or None


def repository(ref: str) -> str:
    """``host:5000/a/b:tag`` and ``host:5000/a/b@sha256:…`` -> ``host:5000/a/b``."""
    return split(ref)[0]


def split_tag(ref: str) -> tuple[str, str]:
    """``repo:tag`` -> (repo, tag); ``latest`` when it names none (what ``docker tag`` takes)."""
    name, tag, _ = split(ref)
    return name, tag or "latest"


def digest_of(ref: str | None) -> str | None:
    """The ``sha256:…`` of a ``repo@sha256:…`` reference (None: it carries no digest)."""
    return split(ref)[2] if ref else None


def same_digest(a: str | None, b: str | None) -> bool:
    """Two ``repo@sha256:…`` references name the same image bytes (repositories aside)."""
    return bool(a and b) and digest_of(a) is not None and digest_of(a) == digest_of(b)
