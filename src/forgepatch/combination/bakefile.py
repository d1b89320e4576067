"""The bake file as a hand-off: ``forgepatch bake`` writes it (``images/bake.py``), a BuildKit
builder builds and pushes its targets (``docker buildx bake -f docker-bake.json --push``), and
``smoke --builds docker-bake.json`` reads it back to find the images that were pushed.

A bake file names its images by content: each target's first tag is the content-addressed tag
``<repo>:<pin>-<arch>-<hash12>`` and its labels carry the whole combination (arch, pin,
patchset, packages, the full content hash). Nothing else is needed from the builder (no
``--metadata-file``): the registry says which image that tag names, and its labels say whether
it is this target's content.

```json
{"group": {"default": {"targets": ["v0_5_23-sm120"]}},
 "target": {"v0_5_23-sm120": {"context": "bake-contexts/v0_5_23-sm120", "dockerfile": "Dockerfile",
                              "args": {"BASE_IMAGE": "...", ...},
                              "tags": ["ghcr.io/org/sglang:v0_5_23-sm120-1a2b3c4d5e6f", "ghcr.io/org/sglang:v0_5_23-sm120"],
                              "labels": {"forgepatch.arch": "sm120", ...}, "network": "none",
                              "platforms": ["linux/arm64"]}}}
```
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forgepatch.combination import LABEL
from forgepatch.combination.documents import validate
from forgepatch.errors import BadInput


class BakeTarget(BaseModel):
    """One target: what BuildKit builds, and the identity forgepatch gave it."""

    model_config = ConfigDict(extra="forbid")

    context: str
    dockerfile: str = "Dockerfile"
    args: dict[str, str] = Field(default_factory=dict)
    tags: list[str] = Field(min_length=1)  # the content-addressed tag first, then the moving tag
    labels: dict[str, str] = Field(default_factory=dict)
    network: str | None = None
    platforms: list[str] | None = Field(default=None, min_length=1)

    @property
    def content_tag(self) -> str:
        return self.tags[0]

    @property
    def platform(self) -> str | None:
        return self.platforms[0] if self.platforms else None

    def label(self, field: str) -> str | None:
        return self.labels.get(LABEL[field])


class BakeGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    targets: list[str]


class BakeFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group: dict[str, BakeGroup] = Field(default_factory=dict)
    target: dict[str, BakeTarget] = Field(min_length=1)
    variable: dict[str, Any] | None = None

    def dumps(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_none=True), indent=2) + "\n"


def is_bake_document(doc: Any) -> bool:
    """A bake file, not a versioned forgepatch document (those name their ``schema``)."""
    return isinstance(doc, dict) and "target" in doc and "schema" not in doc


def parse(path: Path | str, doc: Any) -> BakeFile:
    """The bake file at ``path`` (decoded JSON ``doc``), every target one ``forgepatch bake``
    wrote: BadInput (one line naming the file and the target) otherwise."""
    bake = validate(BakeFile, doc, path, "bake file")
    for name, target in bake.target.items():
        missing = [LABEL[f] for f in ("arch", "pin", "context_hash") if not target.label(f)]
        if missing:
            raise BadInput(f"{path}: target {name!r} has no {missing[0]} label: not a bake file written by "
                           "`forgepatch bake`")
    return bake
