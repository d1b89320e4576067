"""The release ledger: an append-only JSON file of released combinations.

```json
{"format": "forgepatch-ledger/1",
 "releases": [{"tag": "forgepatch/v0.5.23/sm120", ..., "prev": "", "digest": "<sha256>"}, ...]}
```

Entries form a hash chain: ``digest`` is the sha256 of the entry's canonical JSON without
``digest``, and ``prev`` is the previous entry's digest (``""`` for the first), so an edited,
reordered or deleted entry shows. Writers hold the ledger's lock (``journal.path_lock``: a
file in the user cache dir keyed by the ledger's path, never inside the committed ledger
directory; ``FORGEPATCH_LOCK_TIMEOUT``, default 120 s), re-read the file under it, check that the chain is intact, and replace the file atomically (temp file in the
same directory, fsync, rename): a crash leaves the old or the new ledger, never half of one.
Results files a release relied on are archived next to it, content-addressed
(``results/<sha256>.json``), so ``verify`` can re-check them later.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from forgepatch.combination.ledger import FORMAT, LedgerEntry, canonical, entry_digest  # noqa: F401  (re-exported)
from forgepatch.errors import BadInput, Failure
from forgepatch.infra.atomic import stale_temps, write_atomic
from forgepatch.infra.journal import lock_timeout, path_lock

LOCK_TIMEOUT_S = 120.0


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def chain_problem(entries: list[LedgerEntry]) -> str | None:
    """The first break in the hash chain, in words; None when intact."""
    prev = ""
    for i, entry in enumerate(entries, 1):
        label = f"entry {i} ({entry.tag})"
        if entry.prev != prev:
            return f"{label}: its 'prev' does not match entry {i - 1}'s digest (an entry was removed, reordered or edited)"
        if entry.digest != entry.entry_digest():
            return f"{label}: its content does not match its digest (edited after release)"
        prev = entry.digest
    return None


def atomic_write(path: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, rename; the old file stays on any error."""
    write_atomic(path, data, durable=True)


class Ledger:
    def __init__(self, path: Path):
        self.path = Path(path)

    @property
    def results_dir(self) -> Path:
        return self.path.parent / "results"

    def exists(self) -> bool:
        return self.path.is_file()

    def read(self, required: bool = True) -> list[LedgerEntry]:
        """The entries, oldest first. BadInput: missing (when required), unreadable, not JSON,
        or not a ledger. An absent ledger reads as empty when not required."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            if required:
                raise BadInput(f"{self.path}: no release ledger (nothing has been released; run `forgepatch release`)") from None
            return []
        except OSError as exc:
            raise BadInput(f"{self.path}: cannot read ledger: {exc.strerror}") from None
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            where = f"line {exc.lineno} column {exc.colno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
            raise BadInput(f"{self.path}: corrupt ledger ({where}); left as is") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("releases"), list):
            raise BadInput(f"{self.path}: not a forgepatch ledger (want {{\"format\": \"{FORMAT}\", \"releases\": [...]}}); left as is")
        from pydantic import ValidationError

        out = []
        for i, entry in enumerate(doc["releases"], 1):
            if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("tag", "pin", "arch", "commit")):
                raise BadInput(f"{self.path}: corrupt ledger (entry {i} lacks tag/pin/arch/commit); left as is")
            try:
                out.append(LedgerEntry.stored(entry))
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"])
                raise BadInput(f"{self.path}: corrupt ledger (entry {i} ({entry['tag']}): {where}: {err['msg']}); left as is") from None
        return out

    @contextmanager
    def lock(self, timeout: float | None = None) -> Iterator[None]:
        """Exclusive lock for a read-check-append cycle (other releases wait their turn)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with path_lock(self.path, "release (the ledger)", lock_timeout(LOCK_TIMEOUT_S) if timeout is None else timeout):
            self._remove_stale_temps()
            yield

    def _remove_stale_temps(self) -> None:
        """The temp files of a release killed before its rename (the ledger's, an archived
        results file's): every writer holds the lock, so none is live. ``releases/`` is
        committed to git: nothing but the ledger and its archive may stay there."""
        for tmp in [*stale_temps(self.path.parent, self.path.name), *stale_temps(self.results_dir, "*.json")]:
            tmp.unlink(missing_ok=True)

    def head(self) -> str:
        """The digest of the last entry ("" for an empty or absent ledger)."""
        entries = self.read(required=False)
        return (entries[-1].digest or "") if entries else ""

    def append(self, entry: LedgerEntry) -> LedgerEntry:
        """Chain ``entry`` onto the ledger and write it; call under ``lock()``. Returns the
        stored entry (with ``prev`` and ``digest``). Refuses when the chain is broken."""
        entries = self.read(required=False)
        problem = chain_problem(entries)
        if problem:
            raise Failure(f"{self.path}: ledger integrity check failed, {problem}; not appending (see `forgepatch verify`)")
        head = (entries[-1].digest or "") if entries else ""
        if entry.prev is not None and entry.prev != head:  # its tag records the chain head it followed
            raise Failure(f"{self.path}: the ledger moved on while releasing (head {head[:12] or 'none'}, "
                          f"the release followed {entry.prev[:12] or 'none'}); not appending")
        stored = {k: v for k, v in entry.doc().items() if k not in ("prev", "digest")}
        stored["prev"] = head
        stored["digest"] = entry_digest(stored)
        doc = {"format": FORMAT, "releases": [*(e.doc() for e in entries), stored]}
        atomic_write(self.path, (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
        return LedgerEntry.stored(stored)

    # -- archived results ----------------------------------------------------------------
    def archive_results(self, data: bytes) -> Path:
        """Keep a copy of a results file as ``results/<sha256>.json`` (written once)."""
        path = self.results_dir / f"{sha256_bytes(data)}.json"
        if not (path.is_file() and sha256_bytes(path.read_bytes()) == path.stem):
            atomic_write(path, data)
        return path

    def archived_results(self, sha256: str) -> bytes | None:
        path = self.results_dir / f"{sha256}.json"
        try:
            return path.read_bytes()
        except OSError:
            return None
