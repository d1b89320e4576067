"""A persistent string -> JSON mapping (sqlite) for memoised per-blob scan results.

Lives under ``cache_dir("drift")``; safe to delete at any time (a corrupt or foreign file
is simply recreated). Reads hit an in-process dict first; writes are buffered and
committed in one transaction by ``flush()`` / ``close()``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

from forgepatch.paths import cache_dir

_SCHEMA = "CREATE TABLE IF NOT EXISTS memo (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


class BlobCache(MutableMapping[str, Any]):
    def __init__(self, path: Path | None = None):
        if path is None:
            path = cache_dir("drift") / "memo.sqlite3"
        self.path = Path(path)
        self._mem: dict[str, Any] = {}
        self._pending: dict[str, str] = {}
        self.hits = 0
        self.misses = 0
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for attempt in (0, 1):
            try:
                db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(_SCHEMA)
                db.execute("SELECT 1 FROM memo LIMIT 1").fetchall()
                return db
            except sqlite3.DatabaseError:
                if attempt:
                    raise
                for suffix in ("", "-wal", "-shm"):
                    Path(str(self.path) + suffix).unlink(missing_ok=True)
        raise AssertionError("unreachable")

    # -- MutableMapping -----------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        if key in self._mem:
            self.hits += 1
            return self._mem[key]
        row = self._db.execute("SELECT value FROM memo WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            raise KeyError(key)
        self.hits += 1
        value = self._mem[key] = json.loads(row[0])
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self._pending[key] = json.dumps(value, separators=(",", ":"))
        self._mem[key] = value

    def __delitem__(self, key: str) -> None:
        self._pending.pop(key, None)
        self._mem.pop(key, None)
        self._db.execute("DELETE FROM memo WHERE key = ?", (key,))

    def __iter__(self) -> Iterator[str]:
        self.flush()
        for (key,) in self._db.execute("SELECT key FROM memo"):
            yield key

    def __len__(self) -> int:
        self.flush()
        return self._db.execute("SELECT COUNT(*) FROM memo").fetchone()[0]

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except KeyError:
            return False
        return True

    # -- persistence --------------------------------------------------------------------
    def flush(self) -> None:
        if not self._pending:
            return
        items = list(self._pending.items())
        self._pending.clear()
        self._db.execute("BEGIN")
        self._db.executemany("INSERT OR REPLACE INTO memo (key, value) VALUES (?, ?)", items)
        self._db.execute("COMMIT")

    def close(self) -> None:
        self.flush()
        self._db.close()

    def __enter__(self) -> "BlobCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
