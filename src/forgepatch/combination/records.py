"""The build record, versioned: written by ``forgepatch build --record FILE`` (one entry per
arch x pin, replaced when that pair is built again), read by ``forgepatch smoke --builds FILE``
on another host to run exactly the images that were built and pushed.

```json
{"schema": "forgepatch.build-record/1",
 "builds": [{"arch": "sm120", "pin": "v0.5.23", "image_id": "sha256:...",
             "tag": "ghcr.io/org/sglang:v0.5.23-sm120-1a2b3c4d5e6f", "content_hash": "...",
             "digest": "ghcr.io/org/sglang@sha256:...", "uploaded": true,
             "patchset": "...", "upstream": "pypi:0.5.23", "engine": "0.1.0+...",
             "packages": [{"name": "sglang", "upstream": "pypi:0.5.23", "version": "0.5.23",
                           "revision": "<wheel sha256>", "patchset": "..."},
                          {"name": "flashinfer", "upstream": "pypi", "version": "0.6.1", ...}],
             "base_image": "lmsysorg/sglang@sha256:...",
             "audit": {"arch": "sm120", "verdict": "pass", "failing": [], "cuda_libraries": 12},
             "built_at": "2026-12-01T10:00:00Z"}]}
```
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forgepatch.combination import PackageIdentity, Upstream, documents
from forgepatch.errors import BadInput
from forgepatch.infra.atomic import write_atomic

SCHEMA = "forgepatch.build-record/1"


class JitSummary(BaseModel):
    """The verdict on the JIT arch lists of a package the image carries (FlashInfer's
    ``supported_major_versions``), as evidence: the lists named by ``path:line``."""

    model_config = ConfigDict(extra="ignore")

    package: str
    status: str  # absent | admits | rejects | unverified
    version: str | None = None
    dir: str | None = None
    lists: int = 0
    rejecting: list[str] = Field(default_factory=list)  # path:line in the image
    unverified: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, jit: Any) -> "JitSummary":
        """From ``images.jit_audit.JitAudit`` (read by attribute: no document in between)."""
        return cls(package=jit.package, status=jit.status, version=jit.version, dir=jit.dir, lists=len(jit.lists),
                   rejecting=[f.where for f in jit.rejecting], unverified=[f.where for f in jit.unverified])


class AuditSummary(BaseModel):
    """The kernel audit's verdict on an image (``forgepatch audit``), as evidence."""

    model_config = ConfigDict(extra="ignore")

    arch: str
    verdict: str  # pass | fail
    strict: bool = False
    failing: list[str] = Field(default_factory=list)
    cuda_libraries: int = 0
    shared_objects: int = 0
    jit: JitSummary | None = None  # None: an audit from before JIT lists were read

    @classmethod
    def of(cls, report: Any) -> "AuditSummary":
        """From ``images.audit.AuditReport`` (read by attribute: no document in between)."""
        return cls(arch=report.arch, verdict="pass" if report.ok else "fail", strict=report.strict,
                   failing=[lib.path for lib in report.failing],
                   cuda_libraries=report.stats.get("cuda_libraries", 0),
                   shared_objects=report.stats.get("shared_objects", 0),
                   jit=JitSummary.of(report.jit) if report.jit is not None else None)

    def line(self) -> str:
        """``pass for sm120 (12 CUDA libraries)`` / ``FAIL for sm120: libx.so, liby.so``, and
        the JIT lists' verdict where they were read."""
        return self._kernels() + self._jit()

    def _kernels(self) -> str:
        if self.verdict == "pass" and not self.cuda_libraries:  # nothing to judge: said, never a silent pass
            return f"pass for {self.arch} (no CUDA library in the image: no kernel was checked)"
        if self.verdict == "pass" or not self.failing:
            verdict = "pass" if self.verdict == "pass" else "FAIL"
            return f"{verdict} for {self.arch} ({self.cuda_libraries} CUDA librar{'y' if self.cuda_libraries == 1 else 'ies'})"
        return f"FAIL for {self.arch}: {', '.join(self.failing[:3])}{' ...' if len(self.failing) > 3 else ''}"

    def _jit(self) -> str:
        j = self.jit
        if j is None or j.status == "absent":
            return ""
        named = j.unverified or j.rejecting
        return (f"; {j.package} {j.version or ''} JIT lists {j.status}".replace("  ", " ")
                + (f" ({len(named)} of {j.lists}: {', '.join(named[:2])}{' ...' if len(named) > 2 else ''})"
                   if named else f" ({j.lists})"))


class PackageBuild(BaseModel):
    """One package the image carries (``combination.PackageIdentity``): its upstream and the
    patchset of its part of the series. Records written before packages were recorded have
    none (``Build.package_ids`` reads SGLang off ``upstream``/``patchset`` then)."""

    model_config = ConfigDict(extra="ignore")

    name: str
    kind: str  # pypi | git | dir
    version: str | None = None
    revision: str | None = None
    patchset: str = ""

    @classmethod
    def of(cls, ident: PackageIdentity) -> "PackageBuild":
        up = ident.upstream
        return cls(name=ident.name, kind=up.kind, version=up.version, revision=up.revision, patchset=ident.patchset)

    def identity(self) -> PackageIdentity:
        return PackageIdentity(self.name, Upstream(self.kind, self.version, self.revision), self.patchset)


class Build(BaseModel):
    """One image as ``forgepatch build`` left it."""

    model_config = ConfigDict(extra="ignore")

    arch: str
    pin: str
    image_id: str  # the image the digest names (the config digest)
    tag: str  # the content-addressed tag
    content_hash: str
    digest: str | None = None  # repo@sha256:... once pushed
    uploaded: bool | None = None  # None: not pushed; False: the registry had it already
    patchset: str | None = None
    upstream: str | None = None
    engine: str | None = None
    base_image: str | None = None
    audit: AuditSummary | None = None
    built_at: str | None = None
    packages: list[PackageBuild] = Field(default_factory=list)  # every package (empty: a record from before)
    platform: str | None = None  # linux/amd64, linux/arm64 (None: a record from before platforms)

    def package_ids(self) -> dict[str, PackageIdentity]:
        """Every package of the build (name -> identity); a record written before packages
        were recorded names SGLang alone, through its upstream label and patchset."""
        if self.packages:
            return {p.name: p.identity() for p in self.packages}
        if not self.upstream:
            return {}
        kind, _, rest = self.upstream.partition(":")  # pypi:0.5.23 | git:<sha> | dir
        up = (Upstream("pypi", rest or None) if kind == "pypi" else Upstream("git", None, rest or None)
              if kind == "git" else Upstream("dir"))
        return {"sglang": PackageIdentity("sglang", up, self.patchset or "")}


class BuildRecord(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    schema_: str = Field(SCHEMA, alias="schema")
    builds: list[Build] = Field(default_factory=list)

    def find(self, arch: str, pin: str) -> Build | None:
        return next((b for b in self.builds if (b.arch, b.pin) == (arch, pin)), None)

    def put(self, build: Build) -> None:
        """Add ``build``, replacing the entry of the same arch x pin."""
        self.builds = [b for b in self.builds if (b.arch, b.pin) != (build.arch, build.pin)] + [build]

    def dumps(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2) + "\n"

    @classmethod
    def parse(cls, path: Path | str, data: bytes) -> "BuildRecord":
        doc = documents.read(path, data, schema=SCHEMA, what="build record", list_key="builds",
                             writer="forgepatch build --record")
        return documents.validate(cls, doc, path, "build record")

    @classmethod
    def load(cls, path: Path, missing_ok: bool = False) -> "BuildRecord":
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            if missing_ok:
                return cls()
            raise BadInput(f"{path}: no such build record") from None
        except OSError as exc:
            raise BadInput(f"{path}: cannot read the build record: {exc.strerror}") from None
        return cls.parse(path, data)

    def write(self, path: Path) -> None:
        write_atomic(Path(path), self.dumps())
