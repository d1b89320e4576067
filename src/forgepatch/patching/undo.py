"""``apply --reverse``: undo an ``apply --in-place`` exactly (quilt's / StGit's ``pop``).

Each in-place apply that changes a tree records, before its journal commits, what it
replaces: for every file the sha256 of its content before and after (``None`` before: a file
the apply adds) and the bytes before, and the directories it makes. The records of a tree
are a stack in forgepatch's state (``cache_dir(paths.APPLIED_RECORDS)/<key of the tree's path>/N.json``,
never pruned: ``cachestore.STATE``); nothing is kept in the tree itself.

A record is its own proof: it is written before the tree changes, so a run killed between
the two leaves a record whose tree still holds the *before* contents, read as "not applied"
(or "already reversed") and dropped. ``--reverse`` takes the top record, checks the tree holds
exactly what that apply wrote (every file's *after* digest; one file edited, removed or added
since refuses the whole reverse, naming it), then writes the *before* bytes and removes the
files the apply added through the same journal (``infra/journal.py``: crash-safe, all or
none), and drops the record last.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from forgepatch import utctime
from forgepatch.errors import BadInput, Failure
from forgepatch.infra.journal import commit
from forgepatch.paths import APPLIED_RECORDS, cache_dir

FORMAT = "forgepatch-applied/1"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def records_dir(package: Path) -> Path:
    """Where the records of the tree ``package`` live (keyed by its resolved path)."""
    key = _sha(str(Path(package).resolve()).encode())[:32]
    return cache_dir(APPLIED_RECORDS, key)


def _records(package: Path) -> list[Path]:
    folder = records_dir(package)
    return sorted((p for p in folder.glob("*.json") if p.stem.isdigit()), key=lambda p: int(p.stem))


@dataclass
class FileChange:
    path: str  # relative to the package, POSIX
    before: str | None  # sha256 before the apply (None: the apply added the file)
    after: str  # sha256 the apply wrote
    content: bytes | None  # the bytes before (None: added)


@dataclass
class Record:
    where: Path  # the record file
    meta: dict
    files: list[FileChange]
    made_dirs: list[str] = field(default_factory=list)


def _write_new(path: Path, data: bytes) -> None:
    """``path`` appears whole or not at all: written to a temp name, fsync-ed, then linked
    to its name (``link`` fails rather than replace an existing record)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(package: Path, changed: dict[str, bytes], meta: dict) -> Path | None:
    """Record what an in-place apply of ``changed`` (path -> new bytes) replaces in
    ``package``; the caller holds the tree's exclusive lock and commits right after."""
    if not changed:
        return None
    package = Path(package)
    files, made = [], set()
    for rel in sorted(changed):
        target = package / rel
        try:
            old = target.read_bytes()
        except FileNotFoundError:
            old = None
            parent = target.parent
            while parent != package and not parent.exists():
                made.add(parent.relative_to(package).as_posix())
                parent = parent.parent
        files.append({"path": rel, "before": None if old is None else _sha(old), "after": _sha(changed[rel]),
                      "content": None if old is None else base64.b64encode(old).decode("ascii")})
    doc = {"format": FORMAT, "tree": str(package.resolve()), "time": utctime.iso_seconds(),
           **meta, "files": files, "made_dirs": sorted(made)}
    try:
        folder = records_dir(package)
        for left in folder.glob(".*.tmp"):  # a run killed while writing its record (under the same lock)
            left.unlink(missing_ok=True)
        existing = _records(package)
        where = folder / f"{int(existing[-1].stem) + 1 if existing else 1}.json"
        _write_new(where, json.dumps(doc, indent=1).encode())
    except OSError as exc:
        raise BadInput(f"cannot record the in-place apply for --reverse: {exc.filename or ''}: "
                       f"{exc.strerror or exc}; nothing changed") from None
    return where


def _load(where: Path) -> Record:
    try:
        doc = json.loads(where.read_text(encoding="utf-8"))
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}")
        files = []
        for f in doc["files"]:
            content = None if f["content"] is None else base64.b64decode(f["content"], validate=True)
            if (None if content is None else _sha(content)) != f["before"]:
                raise ValueError(f"{f['path']}: saved content does not match its sha256")
            files.append(FileChange(f["path"], f["before"], f["after"], content))
        made = [str(d) for d in doc.get("made_dirs", [])]
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise BadInput(f"{where}: unreadable record of an in-place apply ({exc}); remove it to drop it") from None
    meta = {k: v for k, v in doc.items() if k not in ("files", "made_dirs", "format")}
    return Record(where, meta, files, made)


def _digest(path: Path) -> str | None:
    try:
        return _sha(path.read_bytes())
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return "a directory"


@dataclass
class Reverse:
    """What ``--reverse`` does to one tree: files restored and files removed."""

    package: Path
    record: Record
    restore: dict[str, bytes]  # path -> the bytes before the apply
    remove: dict[str, str]  # path -> the sha256 it holds now (what the apply wrote)

    def to_json(self) -> dict:
        return {"tree": str(self.package), "record": str(self.record.where),
                "arch": self.record.meta.get("arch"), "applied_at": self.record.meta.get("time"),
                "restored": sorted(self.restore), "removed": sorted(self.remove)}

    def originals(self) -> dict[str, bytes]:
        """The tree's bytes now of every file the reverse touches (for ``--diff``)."""
        return {rel: (self.package / rel).read_bytes() for rel in [*self.restore, *self.remove]}


def plan(package: Path, arch: str | None = None, drop: bool = True) -> Reverse:
    """The reverse of the newest in-place apply on ``package`` (the caller holds its lock).

    Failure (exit 1, one line) when nothing is recorded, or when a file differs from what
    that apply wrote (named, with what it holds); BadInput when ``arch`` is not the arch of
    that apply. Records whose apply never reached the tree (killed before its journal
    committed) or that a killed reverse already undid are dropped on the way."""
    package = Path(package)
    stack = _records(package)
    while True:
        if not stack:
            raise Failure(f"--reverse: nothing to reverse in {package}: no in-place apply that changed it is recorded "
                          f"(an apply that changed nothing records none)")
        record = _load(stack.pop())
        now = {f.path: _digest(package / f.path) for f in record.files}
        if all(now[f.path] == f.before for f in record.files):
            if drop:  # its tree holds the contents before it: never applied (killed), or reversed
                record.where.unlink()
            continue
        break
    if arch is not None and record.meta.get("arch") not in (None, arch):
        raise BadInput(f"--arch {arch}: the newest in-place apply on {package} was --arch {record.meta['arch']} "
                       f"({record.meta.get('time')}); reverse it with --arch {record.meta['arch']}")
    for f in record.files:
        if now[f.path] != f.after:
            held = ("it was removed" if now[f.path] is None else "it is a directory" if now[f.path] == "a directory"
                    else "it was edited")
            raise Failure(f"{package / f.path}: changed since apply --in-place ({record.meta.get('time')}): {held}; "
                          f"--reverse restores only a tree that holds exactly what that apply wrote "
                          f"(nothing changed; put the file back, or drop the record {record.where})")
    restore = {f.path: f.content for f in record.files if f.content is not None}
    remove = {f.path: f.after for f in record.files if f.content is None}
    return Reverse(package, record, restore, remove)


def reverse(rev: Reverse) -> None:
    """Write the reverse (journal: all or none) and drop its record (the caller holds the lock)."""
    commit(rev.package, rev.restore, "apply --reverse", remove=rev.remove, rmdirs=rev.record.made_dirs)
    rev.record.where.unlink(missing_ok=True)
