"""What an image is: build args, labels, tags and the content hash (shared by build and bake).

The content hash (label ``forgepatch.context-hash``, 12 hex digits of it in the tag) covers the
build context digest, every build arg (``BASE_IMAGE`` included, by reference) and the identity
labels (arch, pin, upstream, patchset, extra wheels). The base image's local ID is recorded in
``forgepatch.base-image-id``; a cached image only counts as a hit when that matches too.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

from forgepatch.arch import Arch
from forgepatch.errors import BadInput
from forgepatch.images.context import SECRET_NAME, BuildContext, secret_values

HASH_LABEL = "forgepatch.context-hash"
BASE_ID_LABEL = "forgepatch.base-image-id"
CREATED_LABEL = "org.opencontainers.image.created"

# Label -> the build arg the Dockerfile's final LABEL step reads it from (the classic builder
# turns API labels into one step per label; one LABEL step fed by args is much cheaper).
LABEL_ARGS = {
    "org.opencontainers.image.source": "OCI_SOURCE",
    "org.opencontainers.image.version": "OCI_VERSION",
    "org.opencontainers.image.revision": "OCI_REVISION",
    CREATED_LABEL: "OCI_CREATED",
    "org.opencontainers.image.base.name": "OCI_BASE_NAME",
    "org.opencontainers.image.base.digest": "OCI_BASE_DIGEST",
    "forgepatch.arch": "FORGEPATCH_ARCH",
    "forgepatch.torch-cuda-arch-list": "TORCH_CUDA_ARCH_LIST",
    "forgepatch.pin": "FORGEPATCH_PIN",
    "forgepatch.upstream": "FORGEPATCH_UPSTREAM",
    "forgepatch.patchset": "FORGEPATCH_PATCHSET",
    "forgepatch.patches": "FORGEPATCH_PATCHES",
    "forgepatch.extra-wheels": "FORGEPATCH_EXTRA_WHEELS",
    HASH_LABEL: "FORGEPATCH_CONTEXT_HASH",
    BASE_ID_LABEL: "FORGEPATCH_BASE_IMAGE_ID",
}


def tag_safe(text: str, limit: int = 64) -> str:
    """A Docker tag fragment: [A-Za-z0-9_.-], no leading '.' or '-'."""
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip(".-")[:limit]
    return out or "x"


@dataclass
class SourceFacts:
    """Where the upstream package came from (for labels)."""

    label: str  # "pypi:0.5.23", "git:/path@rev", "dir:/path"
    version: str | None = None
    revision: str | None = None  # full git sha or wheel sha256
    repo: str = "https://github.com/sgl-project/sglang"


@dataclass
class ImageSpec:
    arch: Arch
    pin: str
    repo: str  # image repository, e.g. forgepatch/sglang
    base_image: str
    context: BuildContext
    source: SourceFacts
    patchset: str = ""  # patchset hash from the patch engine ("" = unpatched tree)
    patches: list[str] = field(default_factory=list)
    extra_args: dict[str, str] = field(default_factory=dict)  # matrix arches.<a>.build_args

    def __post_init__(self) -> None:
        refuse_secrets(self.build_args(), "build arg")
        refuse_secrets(self.identity_labels(), "label")
        for key, value in self.identity_labels().items():
            if any(c in value for c in '"\\\n$'):
                raise BadInput(f"label {key}: value {value!r} has a quote, backslash, newline or '$'")

    def build_args(self) -> dict[str, str]:
        args = {"BASE_IMAGE": self.base_image, **self.arch.build_args(), **self.extra_args}
        return dict(sorted(args.items()))

    def identity_labels(self) -> dict[str, str]:
        src = self.source
        labels = {
            "org.opencontainers.image.source": src.repo,
            "org.opencontainers.image.version": src.version or "",
            "org.opencontainers.image.revision": src.revision or "",
            "org.opencontainers.image.base.name": self.base_image,
            "forgepatch.arch": self.arch.name,
            "forgepatch.pin": self.pin,
            "forgepatch.upstream": src.label,
            "forgepatch.patchset": self.patchset,
            "forgepatch.patches": ",".join(self.patches),
            "forgepatch.torch-cuda-arch-list": self.arch.torch_arch,
            "forgepatch.extra-wheels": ",".join(f"{n}@sha256:{h}" for n, h in self.context.wheels),
        }
        return labels

    @property
    def content_hash(self) -> str:
        doc = {
            "context": self.context.digest,
            "args": self.build_args(),
            "labels": self.identity_labels(),
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    @property
    def tag(self) -> str:
        return f"{self.repo}:{tag_safe(self.pin)}-{self.arch.name}-{self.content_hash[:12]}"

    @property
    def moving_tag(self) -> str:
        """``<repo>:<pin>-<arch>``: the latest build of that pin and arch."""
        return f"{self.repo}:{tag_safe(self.pin)}-{self.arch.name}"

    def labels(self, base_image_id: str | None = None, created: datetime | None = None) -> dict[str, str]:
        """Every label the image gets (``created``/base ID only when known)."""
        labels = {**self.identity_labels(), HASH_LABEL: self.content_hash}
        if base_image_id:
            labels[BASE_ID_LABEL] = base_image_id
            labels["org.opencontainers.image.base.digest"] = base_image_id
        if created is not None:
            labels[CREATED_LABEL] = created.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return dict(sorted(labels.items()))

    def engine_args(self, labels: dict[str, str]) -> dict[str, str]:
        """Build args for the engine: the image's args plus the label args."""
        args = self.build_args()
        for key, arg in LABEL_ARGS.items():
            args.setdefault(arg, labels.get(key, ""))
        return dict(sorted(args.items()))


def refuse_secrets(values: dict[str, str], what: str, environ: dict[str, str] | None = None) -> None:
    """BadInput when a build arg/label is named like a secret or carries a secret's value."""
    secrets = secret_values(environ)
    for key, value in values.items():
        if SECRET_NAME.search(key):
            raise BadInput(f"{what} {key}: looks like a secret; tokens are runtime environment only")
        for name, secret in secrets.items():
            if secret in value:
                raise BadInput(f"{what} {key}: carries the value of ${name}; tokens are runtime environment only")
