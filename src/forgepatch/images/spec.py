"""What an image is: build args, labels, tags and the content hash (shared by build and bake).

The content hash (label ``forgepatch.context-hash``, 12 hex digits of it in the tag) covers the
build context digest, every build arg (``BASE_IMAGE`` included, by reference) and the identity
labels (arch, pin, upstream, patchset, engine, extra wheels). The base image's local ID is
recorded in ``forgepatch.base-image-id``; a cached image only counts as a hit when that
matches too. Label names, tag formats and the upstream identity are the contract's
(``forgepatch.combination``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime

from forgepatch.arch import Arch
from forgepatch.combination import LABEL, LABEL_ARG, PackageIdentity, Upstream, content_ref, image_ref, packages_label
from forgepatch.errors import BadInput
from forgepatch.images.context import SECRET_NAME, BuildContext, secret_values
from forgepatch import utctime


@dataclass
class SourceFacts:
    """Where the upstream package came from (for labels)."""

    upstream: Upstream
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
    engine: str = ""  # the patch engine's version (combination.engine_version)
    extra_args: dict[str, str] = field(default_factory=dict)  # matrix arches.<a>.build_args
    # every package the image carries, sglang first (empty: sglang alone, from source + patchset)
    package_ids: tuple[PackageIdentity, ...] = ()
    install_args: dict[str, str] = field(default_factory=dict)  # the COPY-only Dockerfile's destinations

    def __post_init__(self) -> None:
        refuse_secrets(self.build_args(), "build arg")
        refuse_secrets(self.identity_labels(), "label")
        for key, value in self.identity_labels().items():
            if any(c in value for c in '"\\\n$'):
                raise BadInput(f"label {key}: value {value!r} has a quote, backslash, newline or '$'")

    @property
    def packages(self) -> tuple[PackageIdentity, ...]:
        """The packages of the image (label ``forgepatch.packages``)."""
        return self.package_ids or (PackageIdentity("sglang", self.source.upstream, self.patchset),)

    def build_args(self) -> dict[str, str]:
        args = {"BASE_IMAGE": self.base_image, **self.arch.build_args(), **self.extra_args, **self.install_args}
        return dict(sorted(args.items()))

    def identity_labels(self) -> dict[str, str]:
        return {
            LABEL["source"]: self.source.repo,
            **self.source.upstream.to_labels(),
            LABEL["base_name"]: self.base_image,
            LABEL["arch"]: self.arch.name,
            LABEL["pin"]: self.pin,
            LABEL["patchset"]: self.patchset,
            LABEL["packages"]: packages_label(self.packages),
            LABEL["patches"]: ",".join(self.patches),
            LABEL["engine"]: self.engine,
            LABEL["torch_cuda_arch_list"]: self.arch.torch_arch,
            LABEL["extra_wheels"]: ",".join(f"{n}@sha256:{h}" for n, h in self.context.wheels),
        }

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
        """``<repo>:<pin>-<arch>-<hash12>``: this content."""
        return content_ref(self.repo, self.pin, self.arch.name, self.content_hash)

    @property
    def moving_tag(self) -> str:
        """``<repo>:<pin>-<arch>``: the latest build of that pin and arch."""
        return image_ref(self.repo, self.pin, self.arch.name)

    def labels(self, base_image_id: str | None = None, created: datetime | None = None) -> dict[str, str]:
        """Every label the image gets (``created``/base ID only when known)."""
        labels = {**self.identity_labels(), LABEL["context_hash"]: self.content_hash}
        if base_image_id:
            labels[LABEL["base_image_id"]] = base_image_id
            labels[LABEL["base_digest"]] = base_image_id
        if created is not None:
            labels[LABEL["created"]] = utctime.iso_seconds(created)
        return dict(sorted(labels.items()))

    def engine_args(self, labels: dict[str, str]) -> dict[str, str]:
        """Build args for the engine: the image's args plus the label args."""
        args = self.build_args()
        for key, arg in LABEL_ARG.items():
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
