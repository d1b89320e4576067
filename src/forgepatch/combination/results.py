"""The smoke results document, versioned: written by ``forgepatch smoke --json`` and
``forgepatch results merge``, read by ``release``, ``verify``, the reports and the bisect cache.

```json
{"schema": "forgepatch.smoke-results/2",
 "summary": {"jobs": 3, "by_status": {"pass": 3}, "failed_required": [], "ok": true},
 "plan": {"jobs": 6, "digest": "<sha256 of the unsharded job ids>"}, "shard": "1/2",
 "jobs": [{"id": "sm120-v0.5.23-tp1", "index": 0, "status": "pass", "image_id": "sha256:...",
           "patchset": "...", "upstream": "pypi:0.5.23", "toolchain": {"torch": "2.11.0+cu130", ...},
           "finished_at": "2026-12-01T10:00:00.000000Z", ...}],
 "logs": "...", "merged_from": []}
```

Version 1 (no ``schema`` key: forgepatch before the contract) reads with the new fields
unset; a newer major version is refused with a one-line message.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from forgepatch.combination import documents, packages_of_labels
from forgepatch.combination.records import AuditSummary
from forgepatch.errors import BadInput
from forgepatch.inimage.signatures import advice

SCHEMA = "forgepatch.smoke-results/2"
_FAMILY = SCHEMA.rsplit("/", 1)[0]
FAILING = ("fail", "timeout", "error", "interrupted")


class Toolchain(BaseModel):
    """The stack a job ran on, as ``forgepatch.inimage.toolchain`` found it inside the image
    (None: not present there). Newer keys are kept."""

    model_config = ConfigDict(extra="allow")

    python: str | None = None
    torch: str | None = None
    cuda_runtime: str | None = None
    nccl: str | None = None
    cublas: str | None = None
    cudnn: str | None = None
    flashinfer: str | None = None
    sgl_kernel: str | None = None
    triton: str | None = None
    sglang: str | None = None
    driver: str | None = None
    gpus: list[str] = Field(default_factory=list)

    def line(self) -> str:
        """``torch 2.11.0+cu130 · CUDA 13.0 · NCCL 2.28.9 · ... · driver 580.95 · NVIDIA H200``."""
        names = (("torch", "torch"), ("cuda_runtime", "CUDA"), ("nccl", "NCCL"), ("cublas", "cuBLAS"),
                 ("cudnn", "cuDNN"), ("flashinfer", "FlashInfer"), ("sgl_kernel", "sgl-kernel"),
                 ("triton", "Triton"), ("sglang", "SGLang"), ("driver", "driver"), ("python", "Python"))
        parts = [f"{label} {getattr(self, key)}" for key, label in names if getattr(self, key)]
        gpus = sorted(set(self.gpus))
        if gpus:
            parts.append(", ".join(f"{self.gpus.count(g)}x {g}" if self.gpus.count(g) > 1 else g for g in gpus))
        return " · ".join(parts) or "nothing recorded"


class ImportedPackage(BaseModel):
    """A package as the job's process imported it (``forgepatch.inimage.imported``)."""

    model_config = ConfigDict(extra="allow")

    version: str | None = None
    version_from: str | None = None  # dist-info (beside dir) | metadata | __version__
    dir: str | None = None  # the directory it was imported from (symlinks resolved)
    imported: bool = False  # False: the import failed (dir: where it was found; error: why)
    error: str | None = None

    def describe(self) -> str:
        return (f"{self.version or 'an unknown version'} from {self.dir or 'an unknown place'}"
                + ("" if self.imported else f" (import failed: {self.error})" if self.error else ""))


def imported_problems(labels: Mapping[str, str], imported: Mapping[str, ImportedPackage | None] | None) -> list[str]:
    """Where a job ran with other packages than its image's labels name (one line each; empty:
    the same, or the job reported nothing): a package the label names that the job's process
    did not find, or found at another version, or at a version it could not read. Packages
    the label does not name are not compared (the image does not claim them)."""
    if imported is None:
        return []
    try:
        named = packages_of_labels(labels)
    except ValueError:
        return []  # the label itself is judged elsewhere (image-packages)
    out = []
    for name, ident in named.items():
        if name not in imported:
            continue
        want = ident.upstream.version
        got = imported[name]
        if got is None:
            out.append(f"{name}: the job's process found none, the image's label names {ident.upstream.label}")
        elif want and got.version != want:
            out.append(f"{name}: the job ran with {got.describe()}, the image's label names {ident.upstream.label}")
    return out


class JobResult(BaseModel):
    """One smoke job's verdict, with the combination it ran on."""

    model_config = ConfigDict(extra="ignore")

    id: str
    arch: str
    pin: str
    profile: str
    kind: str = "server"
    status: str  # pass | fail | timeout | skipped | error | interrupted
    summary: str = ""
    index: int | None = None  # position in the unsharded plan (orders merged shards)
    flags: list[str] = Field(default_factory=list)
    image: str | None = None
    runner: str = ""
    signature: str | None = None
    label: str | None = None
    last_phase: str | None = None
    failing_phase: str | None = None
    error_line: str | None = None
    error_lineno: int | None = None
    exit_code: int | None = None
    timed_out: bool = False
    log_path: str | None = None
    duration_s: float = 0.0
    gpu_ids: list[int] = Field(default_factory=list)
    required: bool = True
    verdict: str | None = None  # the probe's verdict
    probe: dict[str, Any] | None = None
    context: list[dict[str, Any]] = Field(default_factory=list)
    notes: list[dict[str, Any]] = Field(default_factory=list)  # warnings seen (note signatures)
    # the combination it ran on: what `forgepatch release` matches results on
    image_id: str | None = None  # local image ID (docker runner)
    image_digest: str | None = None  # registry digest of that image, when it has one
    patchset: str | None = None  # the image's forgepatch.patchset label
    upstream: str | None = None  # the image's forgepatch.upstream label
    engine: str | None = None  # the image's forgepatch.engine label
    packages: str | None = None  # the image's forgepatch.packages label (None: results written before)
    toolchain: Toolchain | None = None
    # the packages the job's process imported (name -> None: not found); None: not reported
    imported: dict[str, ImportedPackage | None] | None = None
    audit: AuditSummary | None = None  # the kernel audit of the image, from the build record
    finished_at: str | None = None  # UTC, ISO 8601

    @property
    def failed(self) -> bool:
        return self.status in FAILING

    @property
    def advice(self) -> str:
        """Field knowledge of the failure's signature (``known issue: ...; workaround: ...``)."""
        return advice(self.signature) if self.failed else ""

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "JobResult":
        return cls.model_validate(doc)


class Summary(BaseModel):
    jobs: int
    by_status: dict[str, int]
    failed_required: list[str]
    ok: bool

    @classmethod
    def of(cls, jobs: list[JobResult]) -> "Summary":
        counts: dict[str, int] = {}
        for job in jobs:
            counts[job.status] = counts.get(job.status, 0) + 1
        failed = [j.id for j in jobs if j.failed and j.required]
        return cls(jobs=len(jobs), by_status=counts, failed_required=failed, ok=not failed)


class Plan(BaseModel):
    """The unsharded job list a run belongs to (shards of one plan share it)."""

    jobs: int
    digest: str

    @classmethod
    def of(cls, job_ids: list[str]) -> "Plan":
        return cls(jobs=len(job_ids), digest=hashlib.sha256("\n".join(job_ids).encode()).hexdigest())


class Source(BaseModel):
    path: str
    sha256: str


class SmokeResults(BaseModel):
    """A ``forgepatch smoke --json`` (or ``results merge``) document."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    schema_: str = Field(SCHEMA, alias="schema")
    summary: Summary | None = None
    plan: Plan | None = None
    shard: str | None = None
    jobs: list[JobResult]
    logs: str | None = None
    merged_from: list[Source] = Field(default_factory=list)

    @classmethod
    def of(cls, jobs: list[JobResult], **fields: Any) -> "SmokeResults":
        return cls(summary=Summary.of(jobs), jobs=jobs, **fields)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"

    @classmethod
    def parse(cls, path: Path | str, data: bytes) -> "SmokeResults":
        """Read a results document; BadInput (one line naming the file) when it is not one."""
        what = "smoke results file"
        doc = documents.read(path, data, schema=SCHEMA, what=what, list_key="jobs",
                             writer="forgepatch smoke --json", default_schema=f"{_FAMILY}/1")
        for i, job in enumerate(doc["jobs"], 1):
            if not isinstance(job, dict) or not all(isinstance(job.get(k), str) for k in ("id", "arch", "pin", "profile", "status")):
                raise BadInput(f"{path}: job {i} lacks id/arch/pin/profile/status")
        return documents.validate(cls, doc, path, what)
