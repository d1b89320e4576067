"""The registry tags of a release, journaled around the ledger's commit point.

``release`` records the tags it is about to set (``add``) before it appends its ledger entry
(the commit point), sets them after (``complete``), and clears the record. The record is one
JSON file per ledger in the user cache dir (keyed by the ledger's path: ``releases/`` holds
nothing but what is committed)::

    {"format": "forgepatch-pending-tags/1", "ledger": "/…/releases/ledger.json",
     "releases": {"forgepatch/v0.5.23/sm120": {"digest": "repo@sha256:…", "tags": [...], "pid": 42}}}

The next ``release`` (``recover``) finishes what a killed or failed run left: a release
whose entry is in the ledger gets its tags (rolled forward); one whose entry is not had set
none, and its record is dropped (rolled back). Each says so in one line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from forgepatch.errors import BadInput, Failure, ForgepatchError
from forgepatch.infra.atomic import stale_temps, write_atomic
from forgepatch.infra.journal import notify, sha256
from forgepatch.paths import cache_dir

FORMAT = "forgepatch-pending-tags/1"


def _path(ledger) -> Path:
    return cache_dir("pending-tags") / f"{sha256(str(Path(ledger.path).resolve()).encode())[:32]}.json"


def _read(ledger) -> dict[str, Any]:
    path = _path(ledger)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") != FORMAT or not isinstance(doc.get("releases"), dict):
            raise ValueError(f"format {doc.get('format')!r}")
        return doc
    except FileNotFoundError:
        return {"format": FORMAT, "ledger": str(Path(ledger.path).resolve()), "releases": {}}
    except (OSError, ValueError, AttributeError) as exc:
        raise BadInput(f"{path}: unreadable record of an interrupted release's registry tags ({exc}); "
                       f"inspect it, then remove it") from None


def _write(ledger, doc: dict[str, Any]) -> None:
    path = _path(ledger)
    if doc["releases"]:
        write_atomic(path, json.dumps(doc, indent=1) + "\n", durable=True)
    else:
        path.unlink(missing_ok=True)


def add(ledger, tag: str, promotion) -> None:
    """Record the registry tags ``tag``'s release will set (before its ledger entry)."""
    doc = _read(ledger)
    doc["releases"][tag] = {"digest": promotion.digest_ref, "tags": list(promotion.tags), "pid": os.getpid()}
    _write(ledger, doc)


def drop(ledger, tag: str) -> None:
    doc = _read(ledger)
    if doc["releases"].pop(tag, None) is not None:
        _write(ledger, doc)


def complete(ledger, tag: str) -> list[str]:
    """Point the recorded tags of ``tag`` at its digest, then clear the record; returns the
    tags set. Failure (the record stays for the next release) when the registry refuses."""
    from forgepatch.release import promote

    rec = _read(ledger)["releases"].get(tag)
    if rec is None:
        return []
    promo = promote.Promotion(rec["digest"], list(rec["tags"]))
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
        for tag in list(_read(ledger)["releases"]):
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
