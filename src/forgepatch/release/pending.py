"""The registry tags of a release, journaled around the ledger's commit point.

``release`` records the tags it is about to set (``add``) before it appends its ledger entry
(the commit point), sets them after (``complete``), and clears the record. The record is one
JSON file per ledger in the user cache dir (keyed by the ledger's path: ``releases/`` holds
nothing but what is committed), a :class:`PendingRecord`::

    {"format": "forgepatch-pending-tags/1", "ledger": "/…/releases/ledger.json",
     "releases": {"forgepatch/v0.5.23/sm120": {"digest": "repo@sha256:…", "tags": [...], "pid": 42}}}

The next ``release`` (``recover``) finishes what a killed or failed run left: a release
whose entry is in the ledger gets its tags (rolled forward); one whose entry is not had set
none, and its record is dropped (rolled back). Each says so in one line. A record that does
not read (damaged, or written by a newer forgepatch) stops every release with one line
naming the file: its tags cannot be known, so it is left for a person to inspect. Records
written before the model (main 8c2fce6, ``tests/fixtures/pending-tags-v1``) read the same.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from forgepatch.combination import documents
from forgepatch.errors import BadInput, Failure, ForgepatchError
from forgepatch.infra.atomic import stale_temps, write_atomic
from forgepatch.infra.journal import notify, sha256
from forgepatch.infra.refs import is_digest_ref
from forgepatch.paths import cache_dir
from forgepatch.release import promote

FORMAT = "forgepatch-pending-tags/1"
WHAT = "record of an interrupted release's registry tags"


class PendingTags(BaseModel):
    """One release's registry tags, recorded before its ledger entry."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    digest_ref: str = Field(alias="digest")  # repo@sha256:… the tags go to (schema-1 key ``digest``)
    tags: list[str]  # the registry tags (validated first), in ``digest_ref``'s repository
    pid: int | None = None  # the release process that recorded them

    @field_validator("digest_ref")
    @classmethod
    def _a_digest(cls, value: str) -> str:
        if not is_digest_ref(value):
            raise ValueError(f"{value[:200]!r} is not REPO@sha256:<64 hex>")
        return value

    def promotion(self) -> promote.Promotion:
        return promote.Promotion(self.digest_ref, list(self.tags))


class PendingRecord(BaseModel):
    """Every release of one ledger whose registry tags are not set yet, by release tag."""

    model_config = ConfigDict(extra="allow")

    format: str = FORMAT
    ledger: str  # the ledger's resolved path (the file's name is a digest of it)
    releases: dict[str, PendingTags] = Field(default_factory=dict)

    def dumps(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=1) + "\n"


def _path(ledger) -> Path:
    return cache_dir("pending-tags") / f"{sha256(str(Path(ledger.path).resolve()).encode())[:32]}.json"


def _read(ledger) -> PendingRecord:
    """The ledger's record (empty when there is none). BadInput, one line naming the file,
    when it does not read: every release stops until a person has looked at it."""
    path = _path(ledger)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return PendingRecord(ledger=str(Path(ledger.path).resolve()))
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the {WHAT}: {exc.strerror}") from None
    try:
        doc = documents.read(path, data, schema=FORMAT, what=WHAT, list_key="releases", writer="forgepatch release",
                             key="format", container=dict)
        return documents.validate(PendingRecord, doc, path, WHAT)
    except BadInput as exc:
        raise BadInput(f"{exc}; inspect it, then remove it") from None


def _write(ledger, record: PendingRecord) -> None:
    path = _path(ledger)
    if record.releases:
        write_atomic(path, record.dumps(), durable=True)
    else:
        path.unlink(missing_ok=True)


def add(ledger, tag: str, promotion) -> None:
    """Record the registry tags ``tag``'s release will set (before its ledger entry)."""
    record = _read(ledger)
    record.releases[tag] = PendingTags(digest_ref=promotion.digest_ref, tags=list(promotion.tags), pid=os.getpid())
    _write(ledger, record)


def drop(ledger, tag: str) -> None:
    record = _read(ledger)
    if record.releases.pop(tag, None) is not None:
        _write(ledger, record)


def complete(ledger, tag: str) -> list[str]:
    """Point the recorded tags of ``tag`` at its digest, then clear the record; returns the
    tags set. Failure (the record stays for the next release) when the registry refuses."""
    pending = _read(ledger).releases.get(tag)
    if pending is None:
        return []
    promo = pending.promotion()
    try:
        promote.promote(promo)
    except (ForgepatchError, OSError) as exc:
        raise Failure(f"{tag}: released (its ledger entry is written), but the registry did not take its tags "
                      f"{', '.join(promo.refs())} ({' '.join(str(exc).split())[:200]}); the next `forgepatch release` "
                      f"sets them") from None
    drop(ledger, tag)
    return promo.refs()


def recover(ledger) -> list[str]:
    """Finish (entry in the ledger) or drop (no entry) every release's pending registry tags.
    Returns the tags whose record was dropped: the caller says what became of each (its git
    tag may be there, and the same run record the release after all: ``rolled_back``)."""
    path = _path(ledger)
    if not path.is_file() and not stale_temps(path.parent, path.name):
        return []
    dropped = []
    with ledger.lock():  # every writer of the record holds it: a temp file left is a killed run's
        for tmp in stale_temps(path.parent, path.name):
            tmp.unlink(missing_ok=True)
        if not path.is_file():
            return []
        released = {e.tag for e in ledger.read(required=False)}
        for tag in list(_read(ledger).releases):
            if tag in released:
                refs = complete(ledger, tag)
                notify(f"{ledger.path}: completed an interrupted release of {tag}: registry tag(s) {', '.join(refs)} set")
            else:
                drop(ledger, tag)
                dropped.append(tag)
    return dropped


def rolled_back(ledger, tag: str) -> str:
    """The line for a dropped record whose release this run did not record after all."""
    return (f"{ledger.path}: rolled back an interrupted release of {tag} (its ledger entry was never "
            f"written; no registry tag had been set)")
