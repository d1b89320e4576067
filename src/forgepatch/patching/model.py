"""Data model of patches and their results (JSON-serialisable, no libcst imports)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Protocol


class Status(str, Enum):
    """Health of a site or patch. Aggregation order = severity (worst wins)."""

    APPLIED = "applied"  # the codemod changed the tree
    ALREADY = "already-applied"  # the tree is already in the patched state
    ABSORBED = "absorbed-upstream"  # the unpatched upstream already accepts the arch
    NOT_APPLICABLE = "not-applicable"  # applies_to excludes the version, or optional site absent
    DRIFT = "drift"  # a required site was not found

    @classmethod
    def worst(cls, statuses: list["Status"]) -> "Status":
        order = [cls.DRIFT, cls.APPLIED, cls.ALREADY, cls.ABSORBED, cls.NOT_APPLICABLE]
        for s in order:
            if s in statuses:
                return s
        return cls.NOT_APPLICABLE


@dataclass
class SiteResult:
    site: str
    status: Status
    file: str | None = None  # package-relative path ("srt/layers/communicator.py")
    line: int | None = None
    symbol: str | None = None  # qualified function/method that holds the gate
    detail: str = ""
    candidates: list[str] = field(default_factory=list)  # "module.func (file:line)"

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["status"] = self.status.value
        return doc


@dataclass
class PatchResult:
    patch_id: str
    summary: str
    status: Status
    sites: list[SiteResult] = field(default_factory=list)
    changes: dict[str, str] = field(default_factory=dict)  # rel path -> new text (this patch's step)

    def to_json(self) -> dict[str, Any]:
        return {
            "patch": self.patch_id,
            "summary": self.summary,
            "status": self.status.value,
            "sites": [s.to_json() for s in self.sites],
            "files": sorted(self.changes),
        }


@dataclass
class ApplyResult:
    arch: str
    version: str | None
    patches: list[PatchResult] = field(default_factory=list)
    originals: dict[str, str] = field(default_factory=dict)  # rel path -> text before the series
    patchset_hash: str = ""

    @property
    def changed(self) -> dict[str, str]:
        """rel path -> final text, for every file the series changed."""
        out: dict[str, str] = {}
        for p in self.patches:
            out.update(p.changes)
        return {k: v for k, v in out.items() if self.originals.get(k) != v}

    @property
    def drift(self) -> bool:
        return any(p.status is Status.DRIFT for p in self.patches)

    @property
    def in_patched_state(self) -> bool:
        """True when nothing would change and nothing drifted (what ``--check`` asks)."""
        return not self.drift and not self.changed

    def to_json(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "version": self.version,
            "patchset": self.patchset_hash,
            "status": "drift" if self.drift else ("changed" if self.changed else "unchanged"),
            "patches": [p.to_json() for p in self.patches],
            "changed_files": sorted(self.changed),
        }


class Tree(Protocol):
    """A read-only SGLang package tree. Paths are POSIX, relative to the package root
    (the directory that is ``sglang/``), e.g. ``srt/layers/communicator.py``."""

    def paths(self) -> list[str]: ...

    def read(self, rel: str) -> bytes: ...

    def key(self, rel: str) -> str | None:
        """A content key for memoising per-file results (a git blob id), or None."""
        ...
