"""The release ledger's entry, typed: written by ``forgepatch release``, read by ``status``,
``verify``, the integrity check, the registry check and the next ``release``.

The ledger file is ``{"format": "forgepatch-ledger/1", "releases": [ENTRY, ...]}``
(``release/ledger.py`` reads, locks and appends it). One entry::

    {"tag": "forgepatch/v0.5.23/sm120", "tag_object": "<sha1>", "pin": "v0.5.23", "arch": "sm120",
     "repo": "/path/to/fork", "branch": "forgepatch/sm120/v0.5.23", "commit": "<sha1>",
     "upstream": "<upstream commit>", "patchset": "<hash>",
     "image": {"id": "sha256:…", "digest": "repo@sha256:…" | null, "ref": "repo:tag", "created": "…",
               "tags": [...], "patchset": …, "upstream": …, "upstream_version": …,
               "upstream_revision": …, "engine": …, "context_hash": …, "validated": "repo:tag",
               "registry_tags": [...]  (only when promoted in a registry)},
     "audit": AuditSummary | null, "toolchain": Toolchain | null,
     "profiles": {"PROFILE": ProfileEvidence, ...},
     "results": [{"path": …, "sha256": …, "archive": "results/<sha256>.json"}],
     "released_at": "…Z", "prev": "<digest of the entry before>" | "", "digest": "<sha256>"}

The entry's ``digest`` is the sha256 of its canonical JSON without ``digest``; its release
tag carries the digest without ``tag_object`` as well (``content_digest``). Both are computed
over the entry AS STORED: an entry read from a ledger keeps the document it was read from
(``doc()``), so the digests of every ledger written before stay byte-identical whatever
this model adds; a new entry's document is the model's dump, which has the same keys the
untyped writer wrote (``tests/test_ledger_compat.py`` checks both on ledgers of main
f4caa22). Unknown keys are kept (``extra="allow"``).

Schema-1 names kept for compatibility: an image's ``digest`` key (and a profile's
``image_digest``) is a registry reference ``repo@sha256:…``, which the model names
``digest_ref`` (``image_ref``); ``digest`` of the entry itself is the hash chain's.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_serializer

from forgepatch.combination import release_identity
from forgepatch.combination.records import AuditSummary
from forgepatch.combination.results import Toolchain

FORMAT = "forgepatch-ledger/1"
UNBOUND = ("tag_object", "digest")  # the entry fields its release tag cannot carry


def canonical(doc: Any) -> bytes:
    """The bytes an entry's digests are taken over: sorted keys, no spaces, UTF-8."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class _Doc(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def doc(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class ProfileEvidence(_Doc):
    """Why one required profile counts: the passing smoke job the release rests on."""

    status: str = "pass"
    job: str | None = None  # the job id in the results file
    finished_at: str | None = None
    image_id: str | None = None  # the local image ID it ran on
    image_ref: str | None = Field(None, alias="image_digest")  # repo@sha256:… it ran on (schema-1 key)
    audit: AuditSummary | None = None  # the kernel audit the job carried from the build record
    patchset: str | None = None
    results: str | None = None  # sha256 of the results file the job is in
    toolchain: Toolchain | None = None


class ImageRecord(_Doc):
    """The released image as the entry records it (``release.evidence.ImageFacts``)."""

    id: str | None = None  # the image ID (config digest, sha256:…)
    digest_ref: str | None = Field(None, alias="digest")  # repo@sha256:… in the image repo (schema-1 key)
    ref: str | None = None  # the content-addressed build tag repo:tag
    created: str | None = None
    tags: list[str] = Field(default_factory=list)  # without the validated tag the release set
    patchset: str | None = None
    upstream: str | None = None
    upstream_version: str | None = None
    upstream_revision: str | None = None
    engine: str | None = None
    context_hash: str | None = None
    validated: str | None = None  # the local ``validated`` tag (repo:<pin>-<arch>-validated)
    registry_tags: list[str] | None = None  # the registry tags set (validated first); the key only when promoted

    @model_serializer(mode="wrap")
    def _drop_unpromoted(self, handler):
        out = handler(self)
        if out.get("registry_tags") is None:
            out.pop("registry_tags", None)
        return out


class ResultsArchive(_Doc):
    """A results file a release relied on and its archived copy next to the ledger."""

    path: str = ""
    sha256: str = ""
    archive: str = ""  # relative to the ledger's directory: results/<sha256>.json


class LedgerEntry(_Doc):
    """One released combination. Frozen: an entry is never changed once made."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    tag: str
    tag_object: str | None = None
    pin: str
    arch: str
    repo: str | None = None
    branch: str | None = None
    commit: str
    upstream: str | None = None  # the fork branch's upstream commit
    patchset: str | None = None
    image: ImageRecord = Field(default_factory=ImageRecord)
    audit: AuditSummary | None = None
    toolchain: Toolchain | None = None  # when every profile ran on the same stack
    profiles: dict[str, ProfileEvidence] = Field(default_factory=dict)
    results: list[ResultsArchive] = Field(default_factory=list)
    released_at: str | None = None
    prev: str | None = None  # the digest of the entry before ("" for the first)
    digest: str | None = None  # sha256 of this entry's canonical JSON without ``digest``

    _stored: dict[str, Any] | None = PrivateAttr(None)

    @classmethod
    def stored(cls, doc: Mapping[str, Any]) -> "LedgerEntry":
        """An entry as a ledger holds it (pydantic ValidationError for a malformed one); its
        document is kept as read, for the digests."""
        entry = cls.model_validate(doc)
        entry._stored = copy.deepcopy(dict(doc))
        return entry

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> "LedgerEntry":
        """A copy; a changed copy is a new entry (its document is its dump, not the stored one)."""
        out = super().model_copy(update=update, deep=deep)
        if update:
            out._stored = None
        return out

    def doc(self) -> dict[str, Any]:
        """The entry's JSON document: as stored when read from a ledger, else the dump."""
        return copy.deepcopy(self._stored) if self._stored is not None else super().doc()

    def entry_digest(self) -> str:
        return entry_digest(self.doc())

    def content_digest(self) -> str:
        return content_digest(self.doc())

    def identity(self) -> dict[str, Any]:
        """``combination.release_identity`` of this entry."""
        return release_identity(self.pin, self.arch, self.commit, self.patchset, self.image.id, list(self.profiles))


def _as_doc(entry: "LedgerEntry | Mapping[str, Any]") -> Mapping[str, Any]:
    return entry.doc() if isinstance(entry, LedgerEntry) else entry


def entry_digest(entry: "LedgerEntry | Mapping[str, Any]") -> str:
    """sha256 of the entry's canonical JSON without ``digest`` (the hash chain)."""
    return hashlib.sha256(canonical({k: v for k, v in _as_doc(entry).items() if k != "digest"})).hexdigest()


def content_digest(entry: "LedgerEntry | Mapping[str, Any]") -> str:
    """sha256 of the entry without ``tag_object`` and ``digest`` (``prev`` included): what
    its release tag's ``Forgepatch-Ledger-Entry`` trailer carries."""
    return hashlib.sha256(canonical({k: v for k, v in _as_doc(entry).items() if k not in UNBOUND})).hexdigest()
