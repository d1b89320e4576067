"""``forgepatch cache info|prune``: what forgepatch keeps in its cache directory, and removing it.

Kinds forgepatch writes and can always make again (PyPI wheels, git clones, unpacked trees,
build contexts, smoke logs and results, drift and gates memos, base-image facts) may be
pruned; ``locks`` and ``pending-tags`` (what an interrupted release must still finish) are
state, never pruned by age; ``applied`` (the records ``apply --reverse`` undoes an in-place
apply from, one entry per tree) is state too, an entry pruned only once the tree it was
recorded for is gone; anything else (a test's torch build, tool downloads) is listed as
``other`` and left alone. Pruning removes whole entries (a wheel version, a context, a clone)
whose newest file is older than the cut-off.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from forgepatch.paths import APPLIED_RECORDS

PRUNABLE = ("wheels", "git", "trees", "upstream-tars", "contexts", "smoke", "drift", "gates", "base-facts")
STATE = ("locks", "pending-tags", APPLIED_RECORDS)


@dataclass
class Entry:
    kind: str  # a PRUNABLE or STATE name, or "other"
    path: Path
    bytes: int
    files: int
    newest: float  # mtime of its newest file

    def to_json(self) -> dict:
        return {"kind": self.kind, "path": str(self.path), "bytes": self.bytes, "files": self.files,
                "newest": self.newest}


def _measure(path: Path) -> tuple[int, int, float]:
    if path.is_symlink() or path.is_file():
        st = path.lstat()
        return st.st_size, 1, st.st_mtime
    size = files = 0
    newest = 0.0  # the newest file's mtime (a directory's own mtime only when it holds none)
    for root, _, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            size, files, newest = size + st.st_size, files + 1, max(newest, st.st_mtime)
    return size, files, newest if files else path.lstat().st_mtime


def entries(root: Path) -> list[Entry]:
    """Each kind's entries (the children of a PRUNABLE directory), and STATE / other top-level items whole."""
    out: list[Entry] = []
    for top in sorted(root.iterdir()) if root.is_dir() else []:
        if top.name in (*PRUNABLE, APPLIED_RECORDS) and top.is_dir() and not top.is_symlink():
            for child in sorted(top.iterdir()):
                out.append(Entry(top.name, child, *_measure(child)))
        else:
            out.append(Entry(top.name if top.name in STATE else "other", top, *_measure(top)))
    return out


def summary(items: list[Entry]) -> dict[str, dict[str, int]]:
    kinds: dict[str, dict[str, int]] = {}
    for e in items:
        k = kinds.setdefault(e.kind, {"entries": 0, "bytes": 0, "files": 0})
        k["entries"] += 1
        k["bytes"] += e.bytes
        k["files"] += e.files
    return kinds


def prune(root: Path, older_than_days: float, dry_run: bool = False, now: float | None = None) -> list[Entry]:
    """Remove the PRUNABLE entries whose newest file is older than the cut-off; returns them."""
    cut = (now if now is not None else time.time()) - older_than_days * 86400
    gone = [e for e in entries(root) if (e.kind in PRUNABLE and e.newest < cut)
            or (e.kind == APPLIED_RECORDS and _tree_gone(e.path))]
    if not dry_run:
        for e in gone:
            if e.path.is_dir() and not e.path.is_symlink():
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                e.path.unlink(missing_ok=True)
    return gone


def _tree_gone(records: Path) -> bool:
    """Are these in-place apply records of a tree that no longer exists? (A record that
    cannot be read keeps its entry: unknown is not gone.)"""
    import json

    trees = set()
    for record in records.glob("*.json"):
        try:
            trees.add(json.loads(record.read_text(encoding="utf-8"))["tree"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
    return bool(trees) and not any(Path(t).exists() for t in trees)


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
