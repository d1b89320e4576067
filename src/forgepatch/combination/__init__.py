"""THE hand-off contract between stages: what a combination is and how every stage spells it.

A *combination* is exactly this upstream code (``Upstream``: a PyPI release's version and
wheel sha256, or a git commit), with exactly this patch series (the patchset hash, run by
this patch engine) for one arch, in exactly this image (its local ID and, once pushed, its
registry digest). ``fork`` writes it into commit trailers, ``build`` into image labels,
``smoke`` into every result, ``release`` into tags and the ledger, and each stage checks the
one before it against the pin.

Here, once each: the identity types, the image label table, the image reference and tag
format, the fork branch name and the git trailers. The results schema (pydantic, versioned)
is ``forgepatch.combination.results``. Standard library only: cheap to import everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

# -- the upstream identity ------------------------------------------------------------------

@dataclass(frozen=True)
class Upstream:
    """What upstream code a stage worked on.

    ``kind`` is ``pypi`` (``version`` the release, ``revision`` its wheel's sha256), ``git``
    (``revision`` the full commit SHA, ``version`` the package version found there) or ``dir``
    (a local directory: no identity to check). A field that is not known is None. A PyPI
    pin's ``wheels`` are the digests of every wheel of the release it records (one per CPython
    and platform): each is that pin's code, for the base that installs it."""

    kind: str
    version: str | None = None
    revision: str | None = None
    wheels: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def label(self) -> str:
        """The ``forgepatch.upstream`` image label: ``pypi:0.5.23`` | ``git:<sha>`` | ``dir``."""
        if self.kind == "pypi":
            return f"pypi:{self.version}"
        if self.kind == "git":
            return f"git:{self.revision}"
        return "dir"

    def describe(self) -> str:
        """For messages: ``PyPI sglang 0.5.23 (wheel sha256 1a2b3c4d5e6f)``,
        ``git 3f2a9c1b2c3d (version 0.5.21.dev3)``, ``a local directory``."""
        if self.kind == "pypi":
            sha = f" (wheel sha256 {self.revision[:12]})" if self.revision else ""
            return f"PyPI sglang {self.version}{sha}"
        if self.kind == "git":
            version = f" (version {self.version})" if self.version else ""
            return f"git {str(self.revision)[:12]}{version}"
        return "a local directory" + (f" (version {self.version})" if self.version else "")

    def mismatch(self, pin: "Upstream") -> str | None:
        """Why this code is not the code ``pin`` names (None: it is, as far as both record).

        A git pin is a commit: only that commit matches. A PyPI pin is a release: a wheel of
        that version (and that sha256, when both are recorded) matches, and so does a git
        commit whose package carries that version (a fork branch made from the release tag).
        A local directory never matches a pin."""
        if self.kind == "dir":
            return "it comes from a local directory, which has no upstream identity"
        if pin.kind == "git":
            if self.kind != "git":
                return "a git pin is a commit; this is not git code"
            return None if self.revision == pin.revision else "a different commit"
        if pin.kind == "pypi":
            if self.version != pin.version:
                return "a different version"
            if (self.kind == "pypi" and self.revision and pin.revision and self.revision != pin.revision
                    and self.revision not in pin.wheels):
                return "a different wheel of that version"
            return None
        return None

    def to_labels(self) -> dict[str, str]:
        return {LABEL["upstream"]: self.label, LABEL["version"]: self.version or "",
                LABEL["revision"]: self.revision or ""}

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> "Upstream | None":
        """From an image's labels (None when it has no ``forgepatch.upstream`` label)."""
        label = labels.get(LABEL["upstream"])
        if not label:
            return None
        kind = label.split(":", 1)[0]
        return cls(kind if kind in ("pypi", "git") else "dir", labels.get(LABEL["version"]) or None,
                   labels.get(LABEL["revision"]) or None)

    @classmethod
    def of_pin(cls, pin: Any) -> "Upstream":
        """A matrix pin as recorded (``config.Pin``): its rev may still be abbreviated."""
        if pin.pypi:
            return cls("pypi", pin.pypi, pin.sha256, tuple(sorted((getattr(pin, "wheels", None) or {}).values())))
        return cls("git", pin.version, pin.rev)

    @classmethod
    def of_source(cls, source: Any) -> "Upstream":
        """A resolved source (``sources.SourceTree``)."""
        return cls(source.kind, source.version, source.revision)


# -- every package of a combination --------------------------------------------------------

PACKAGE_FIELDS = 4  # kind:version:revision:patchset after ``name=``


@dataclass(frozen=True)
class PackageIdentity:
    """One package an image carries: its upstream code and the patchset hash of the part of
    the series that patches it (``""``: no patch). SGLang is one of them; an image built
    before packages were labelled has SGLang alone (``packages_of_labels``)."""

    name: str  # forgepatch's package name (``packages.Package.name``): sglang, flashinfer
    upstream: Upstream
    patchset: str = ""

    def to_label(self) -> str:
        """``flashinfer=pypi:0.6.1:<wheel sha256>:<patchset>`` (empty fields stay empty)."""
        up = self.upstream
        return f"{self.name}={up.kind}:{up.version or ''}:{up.revision or ''}:{self.patchset}"

    @classmethod
    def from_label(cls, text: str) -> "PackageIdentity":
        """The inverse of ``to_label``; ValueError for any other shape."""
        name, sep, rest = text.strip().partition("=")
        parts = rest.split(":")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or len(parts) != PACKAGE_FIELDS:
            raise ValueError(f"not a package identity: {text.strip()[:80]!r}")
        kind, version, revision, patchset = parts
        if kind not in ("pypi", "git", "dir"):
            raise ValueError(f"package {name}: unknown upstream kind {kind!r}")
        return cls(name, Upstream(kind, version or None, revision or None), patchset)

    def mismatch(self, want: "PackageIdentity") -> str | None:
        """Why this is not the package identity ``want`` (None: the same, as far as both record):
        another upstream (``Upstream.mismatch``, with the versions) or another patchset."""
        why = self.upstream.mismatch(want.upstream)
        if why:
            return f"{self.name}: {why} ({_short(self.upstream)} vs {_short(want.upstream)})"
        if (self.patchset or "") != (want.patchset or ""):
            return f"{self.name}: patchset {self.patchset[:12] or '(none)'} vs {want.patchset[:12] or '(none)'}"
        return None


def _short(up: Upstream) -> str:
    if up.kind == "pypi":
        return f"pypi {up.version}" + (f" {up.revision[:12]}" if up.revision else "")
    if up.kind == "git":
        return f"git {str(up.revision)[:12]}"
    return "dir"


def packages_label(packages: "list[PackageIdentity] | tuple[PackageIdentity, ...]") -> str:
    """The ``forgepatch.packages`` label: every package's identity, ``; ``-separated."""
    return "; ".join(p.to_label() for p in packages)


def packages_of_labels(labels: Mapping[str, str]) -> dict[str, PackageIdentity]:
    """Every package an image's labels name (name -> identity). An image built before the
    ``forgepatch.packages`` label existed carries SGLang only: its identity is read off the
    upstream and patchset labels (none at all: ``{}``). ValueError for a malformed label."""
    text = labels.get(LABEL["packages"])
    if text:
        out = {}
        for part in text.split(";"):
            if part.strip():
                ident = PackageIdentity.from_label(part)
                out[ident.name] = ident
        return out
    up = Upstream.from_labels(labels)
    return {} if up is None else {"sglang": PackageIdentity("sglang", up, labels.get(LABEL["patchset"]) or "")}


def packages_mismatch(got: Mapping[str, PackageIdentity], want: Mapping[str, PackageIdentity]) -> list[str]:
    """Every difference between two combinations' packages: one missing on either side, or
    an identity that differs (``PackageIdentity.mismatch``). Empty: the same packages."""
    out = []
    for name in sorted(set(got) | set(want), key=lambda n: (n != "sglang", n)):
        if name not in got:
            out.append(f"{name}: not in the image (validated with {want[name].to_label()})")
        elif name not in want:
            out.append(f"{name}: the image carries it ({got[name].to_label()}); the validated combination does not")
        elif why := got[name].mismatch(want[name]):
            out.append(why)
    return out


def packages_problems(labels: Mapping[str, str], want: Mapping[str, PackageIdentity]) -> list[str]:
    """Why an image (its labels) does not carry the packages ``want`` names (one line each;
    empty: it does): a package it lacks (an image built before, or without that package's
    patches), another release of it than the pin's, another patchset of its part."""
    try:
        got = packages_of_labels(labels)
    except ValueError as exc:
        return [f"label {LABEL['packages']}: {exc}"]
    out = []
    for name, ident in want.items():
        have = got.get(name)
        if ident.upstream.kind == "none":
            out.append(f"{name}: the pin names no version of it ([pins.PIN.packages.{name}] in matrix.toml)")
        elif have is None:
            out.append(f"{name}: the image does not carry it patched (label {LABEL['packages']} names "
                       f"{', '.join(got) or 'no package'})")
        elif why := have.mismatch(ident):
            out.append(why)
    return out


# -- an upstream identity as a pin records it -------------------------------------------------

def pin_identity(pin: Any, repo: Any = None) -> Upstream:
    """A matrix pin's recorded identity; a git pin's rev resolved in ``repo`` (an
    ``infra.gitrepo.GitRepo``) when it is given and knows the rev."""
    want = Upstream.of_pin(pin)
    if repo is not None and want.kind == "git" and want.revision:
        return Upstream("git", want.version, repo.ref(want.revision) or want.revision)
    return want



# -- image labels: the one table ---------------------------------------------------------------

# field -> (image label, build arg). ``forgepatch build`` passes each label as the build arg
# the shipped Dockerfile's final LABEL step reads it from (one LABEL step fed by args: the
# classic builder turns API labels into one step per label, which is much slower).
LABELS: dict[str, tuple[str, str]] = {
    "source": ("org.opencontainers.image.source", "OCI_SOURCE"),
    "version": ("org.opencontainers.image.version", "OCI_VERSION"),
    "revision": ("org.opencontainers.image.revision", "OCI_REVISION"),
    "created": ("org.opencontainers.image.created", "OCI_CREATED"),
    "base_name": ("org.opencontainers.image.base.name", "OCI_BASE_NAME"),
    "base_digest": ("org.opencontainers.image.base.digest", "OCI_BASE_DIGEST"),
    "arch": ("forgepatch.arch", "FORGEPATCH_ARCH"),
    "torch_cuda_arch_list": ("forgepatch.torch-cuda-arch-list", "TORCH_CUDA_ARCH_LIST"),
    "pin": ("forgepatch.pin", "FORGEPATCH_PIN"),
    "upstream": ("forgepatch.upstream", "FORGEPATCH_UPSTREAM"),
    "patchset": ("forgepatch.patchset", "FORGEPATCH_PATCHSET"),
    "patches": ("forgepatch.patches", "FORGEPATCH_PATCHES"),
    "engine": ("forgepatch.engine", "FORGEPATCH_ENGINE"),
    "extra_wheels": ("forgepatch.extra-wheels", "FORGEPATCH_EXTRA_WHEELS"),
    "packages": ("forgepatch.packages", "FORGEPATCH_PACKAGES"),  # every package: PackageIdentity.to_label
    "context_hash": ("forgepatch.context-hash", "FORGEPATCH_CONTEXT_HASH"),
    "base_image_id": ("forgepatch.base-image-id", "FORGEPATCH_BASE_IMAGE_ID"),
}
LABEL: dict[str, str] = {field: label for field, (label, _) in LABELS.items()}
LABEL_ARG: dict[str, str] = dict(LABELS.values())  # image label -> build arg

# labels on smoke containers (not images): which run made them, which job, which process
CONTAINER_RUN = "forgepatch.smoke"
CONTAINER_JOB = "forgepatch.job"
CONTAINER_OWNER = "forgepatch.owner"  # host:pid of the forgepatch process that made it


# -- image references and tags ---------------------------------------------------------------

VALIDATED = "validated"
DEFAULT_SMOKE_IMAGE = "{repo}:{pin}-{arch}"  # [smoke] image: placeholders {repo} {pin} {arch}


def tag_safe(text: str, limit: int = 64) -> str:
    """A Docker tag fragment: [A-Za-z0-9_.-], no leading '.' or '-'."""
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip(".-")[:limit]
    return out or "x"


def image_tag(pin: str, arch: str, suffix: str | None = None) -> str:
    """``<pin>-<arch>[-<suffix>]``, the pin made tag-safe."""
    return f"{tag_safe(pin)}-{arch}" + (f"-{suffix}" if suffix else "")


def image_ref(repo: str, pin: str, arch: str, suffix: str | None = None) -> str:
    """``<repo>:<pin>-<arch>`` (the latest build, what smoke runs by default);
    with a suffix ``<repo>:<pin>-<arch>-<suffix>``."""
    return f"{repo}:{image_tag(pin, arch, suffix)}"


def content_ref(repo: str, pin: str, arch: str, content_hash: str) -> str:
    """``<repo>:<pin>-<arch>-<hash12>``: the tag of one build's content."""
    return image_ref(repo, pin, arch, content_hash[:12])


def validated_ref(repo: str, pin: str, arch: str) -> str:
    """``<repo>:<pin>-<arch>-validated``: the image of the newest release of pin x arch."""
    return image_ref(repo, pin, arch, VALIDATED)


def release_image_tag(tag: str) -> str:
    """The registry tag of a release: its git tag name made tag-safe
    (``forgepatch/v0.5.23/sm120`` -> ``forgepatch-v0.5.23-sm120``)."""
    return tag_safe(tag, 128)


def smoke_image(template: str, repo: str, pin: str, arch: str) -> str:
    """``[smoke] image`` (or ``--image``) with its placeholders filled in the builder's way."""
    return template.format(repo=repo, pin=tag_safe(pin), arch=arch)


# -- fork branches, release tags and git trailers ---------------------------------------------
# (the orders differ and stay: branches and tags already made carry them)

def branch_name(arch: str, pin: str) -> str:
    """The fork branch of one arch x pin: ``forgepatch/<arch>/<pin>``."""
    return f"forgepatch/{arch}/{pin}"


RELEASE_TAG_TEMPLATE = "forgepatch/{pin}/{arch}"  # [release] tag_template's default


def release_tag(template: str, pin: str, arch: str) -> str:
    """The git tag of a release: ``[release] tag_template`` filled in (placeholders ``{pin}``
    ``{arch}``); ValueError naming the template's problem."""
    try:
        return template.format(pin=pin, arch=arch)
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"[release] tag_template {template!r}: {exc} (placeholders: {{pin}} {{arch}})") from None


def release_tag_form(template: str | None) -> "re.Pattern[str] | None":
    """A regex matching every tag name ``template`` can give (None: no template, or not one)."""
    import string

    if not template:
        return None
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:
        return None
    return re.compile("".join(re.escape(text) + ("[^/]+" if name is not None else "") for text, name, _, _ in parts))


class Trailer:
    """Git trailer keys: on fork commits (``forgepatch fork``) and release tags."""

    PATCH = "Forgepatch-Patch"
    ARCH = "Forgepatch-Arch"
    PIN = "Forgepatch-Pin"
    UPSTREAM = "Forgepatch-Upstream"  # fork commits: the upstream commit SHA
    UPSTREAM_VERSION = "Forgepatch-Upstream-Version"
    PATCHSET = "Forgepatch-Patchset"
    COMMIT = "Forgepatch-Commit"  # release tags: the fork branch head
    IMAGE = "Forgepatch-Image"
    IMAGE_DIGEST = "Forgepatch-Image-Digest"
    PROFILES = "Forgepatch-Profiles"
    RESULTS = "Forgepatch-Results-Sha256"
    # release tags, tamper evidence (forgepatch.release.integrity): the sha256 of the ledger
    # entry the tag belongs to (every field but the tag object's id and the entry's own
    # digest), the digest of the entry before it (the chain head at release; LEDGER_GENESIS
    # for the first) and the release time
    LEDGER_ENTRY = "Forgepatch-Ledger-Entry"
    LEDGER_PREV = "Forgepatch-Ledger-Prev"
    RELEASED_AT = "Forgepatch-Released-At"


LEDGER_GENESIS = "none"  # Forgepatch-Ledger-Prev of the first release of a ledger


# -- what makes two releases the same combination ----------------------------------------------

def release_identity(pin, arch, commit, patchset, image_id, profiles) -> dict[str, Any]:
    """The fields a release tag, its ledger entry and a new candidate are compared on (results
    files may differ: the same combination re-validated is the same release)."""
    return {"pin": pin, "arch": arch, "commit": commit, "patchset": patchset, "image": image_id,
            "profiles": sorted(profiles)}
