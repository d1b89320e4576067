"""Data model of patches and their results (JSON-serialisable, no libcst imports)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Protocol

# The pseudo-site that carries the self-check's findings in a patch's result: feature gates
# that still reject the arch after patching (incomplete), the patch's declared exceptions
# (ignored), and any edit that was made but not reported, or reported but not made.
SELF_CHECK_SITE = "self-check"
# What to do about an incomplete gate (printed with every one).
INCOMPLETE_HINT = "add a site for it to the patch, or mark it `ignore` with a reason"
# how a site's detail reports a predicate defined from the arch registry because the tree does
# not provide it (``patch test`` holds examples to their ``fallback`` key)
FALLBACK_HELPER = "from the arch registry (this tree does not provide it)"


class Status(str, Enum):
    """Health of a site or patch. Aggregation order = severity (worst wins)."""

    APPLIED = "applied"  # the codemod changed the tree
    ALREADY = "already-applied"  # the tree is already in the patched state
    ABSORBED = "absorbed-upstream"  # the unpatched upstream already accepts the arch
    IGNORED = "ignored"  # a gate the patch declares as an intentional exception (with a reason)
    NOT_APPLICABLE = "not-applicable"  # a semantic applies_to excludes the version, or an optional site is absent
    INCOMPLETE = "incomplete"  # patched, but a gate of the feature still rejects the arch
    UNVERIFIED = "unverified"  # an arch read of the feature the verifier cannot evaluate (closed world)
    WRONG = "wrong"  # the edit changes the behaviour of an arch the patch is not for
    DRIFT = "drift"  # a required site was not found (or is ambiguous)
    REVIEW = "review"  # the patch's edit set is not one its lock accepts for this arch (editlock)

    @classmethod
    def worst(cls, statuses: list["Status"]) -> "Status":
        order = [cls.DRIFT, cls.WRONG, cls.UNVERIFIED, cls.INCOMPLETE, cls.REVIEW, cls.APPLIED, cls.ALREADY, cls.ABSORBED, cls.IGNORED,
                 cls.NOT_APPLICABLE]
        for s in order:
            if s in statuses:
                return s
        return cls.NOT_APPLICABLE

    @property
    def failed(self) -> bool:
        """Exit 1, nothing written."""
        return self.value in FAILED


# Status values that fail a run (exit 1, nothing written, no branch moved, no image built).
FAILED = ("drift", "incomplete", "unverified", "wrong", "review")


@dataclass
class Location:
    """One place a site touched or judged: every edit is one of these, and so is every
    feature gate the self-check found still rejecting the arch."""

    status: Status
    file: str | None  # package-relative path
    line: int | None  # upstream line (the tree as given, before the series)
    symbol: str | None  # qualified function/method ("<module>" for module-level additions)
    detail: str = ""
    gate: str | None = None  # the gate's code, for the self-check's findings

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["status"] = self.status.value
        return doc

    def __str__(self) -> str:
        gate = f"`{self.gate}` " if self.gate else ""
        return f"{self.file}:{self.line}: {self.symbol}: {gate}{self.detail}"


@dataclass
class SiteResult:
    site: str
    status: Status
    file: str | None = None  # package-relative path ("srt/layers/communicator.py")
    line: int | None = None
    symbol: str | None = None  # qualified function/method that holds the gate
    detail: str = ""
    candidates: list[str] = field(default_factory=list)  # "module.func (file:line)"
    locations: list[Location] = field(default_factory=list)  # every place, in tree order

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["status"] = self.status.value
        doc["locations"] = [loc.to_json() for loc in self.locations]
        return doc


@dataclass
class PatchResult:
    patch_id: str
    summary: str
    status: Status
    sites: list[SiteResult] = field(default_factory=list)
    changes: dict[str, str] = field(default_factory=dict)  # rel path -> new text (this patch's step)
    # what this patch changed, read off the trees (editset.Edit, in order) and its digest
    # (None: it changed nothing); set by the series' lock check (editlock.review)
    edits: list[Any] = field(default_factory=list, repr=False)
    edit_set: str | None = None
    # every gate of the feature the evaluation judged (``evaluation.GateCheck``: file, line,
    # function, status, per-arch value before/after), in tree order
    checks: list[Any] = field(default_factory=list)
    # what the evaluation did not search, and why (a marker too common to name the feature)
    scope: list[str] = field(default_factory=list)

    @property
    def edited_files(self) -> set[str]:
        """Files where this patch reports an edit (status applied)."""
        return {loc.file for s in self.sites for loc in s.locations
                if loc.status is Status.APPLIED and loc.file}

    def to_json(self) -> dict[str, Any]:
        return {
            "patch": self.patch_id,
            "summary": self.summary,
            "status": self.status.value,
            "sites": [s.to_json() for s in self.sites],
            "files": sorted(self.changes),
            "edit_set": self.edit_set,
            "edits": [e.to_doc() for e in self.edits],
            "evaluation": [c.to_json() for c in self.checks],
            "scope": list(self.scope),
        }


@dataclass
class ApplyResult:
    arch: str
    version: str | None
    patches: list[PatchResult] = field(default_factory=list)
    originals: dict[str, str] = field(default_factory=dict)  # rel path -> text before the series
    patchset_hash: str = ""
    verified: bool = False  # the self-check ran (gate coverage + changed == reported)

    @property
    def changed(self) -> dict[str, str]:
        """rel path -> final text, for every file the series changed."""
        out: dict[str, str] = {}
        for p in self.patches:
            out.update(p.changes)
        return {k: v for k, v in out.items() if self.originals.get(k) != v}

    # rel path -> how each changed file was decoded (``sourcetext.SourceText``: its encoding,
    # BOM); the texts above are decoded text, the files are written back through it
    sources: dict[str, Any] = field(default_factory=dict, repr=False)

    def encode(self, rel: str, text: str) -> bytes:
        """``text`` (a version of file ``rel``) as the bytes to write: the file's own
        encoding and BOM, its line ends kept (UTF-8 for a file read from memory)."""
        src = self.sources.get(rel)
        return src.encode(text) if src is not None else text.encode("utf-8")

    def changed_bytes(self) -> dict[str, bytes]:
        """rel path -> the bytes to write, for every file the series changed: every byte
        outside the edited lines is the original's."""
        return {rel: self.encode(rel, text) for rel, text in self.changed.items()}

    def original_bytes(self) -> dict[str, bytes]:
        """rel path -> the original bytes of every changed file (for a byte-exact diff); a
        file the series adds has none (absent from the dict)."""
        return {rel: self.encode(rel, self.originals[rel]) for rel in self.changed
                if self.originals.get(rel) is not None}

    @property
    def drift(self) -> bool:
        """The series does not hold on this tree: a required site is missing or ambiguous
        (drift), or a gate of the feature still rejects the arch after patching (incomplete).
        Either way: exit 1, nothing written, no branch moved, no image built."""
        return any(p.status.failed for p in self.patches)

    @property
    def incomplete(self) -> bool:
        return any(p.status is Status.INCOMPLETE for p in self.patches)

    @property
    def in_patched_state(self) -> bool:
        """True when nothing would change and nothing failed (what ``--check`` asks)."""
        return not self.drift and not self.changed

    @property
    def status(self) -> str:
        worst = Status.worst([p.status for p in self.patches])
        if worst.failed:
            return worst.value
        return "changed" if self.changed else "unchanged"

    def to_json(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "version": self.version,
            "patchset": self.patchset_hash,
            "status": self.status,
            "verified": self.verified,
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
