"""``apply --out DIR``: what forgepatch may replace there, and the record of what it wrote.

``DIR/sglang`` is replaced as a whole on each run, so forgepatch must never replace what it
did not write. It keeps a marker file, ``DIR/.forgepatch-out`` (JSON: the arch, source and
every file it wrote under ``sglang/`` with size and mtime). A run may write into ``DIR``
when:

- ``DIR`` does not exist or is empty;
- ``DIR`` holds the marker and ``DIR/sglang`` holds exactly the files the marker lists,
  unchanged (a file added or edited there since would be lost: refused, naming it);
  ``__pycache__`` directories (bytecode from importing the output) do not count.

Anything else (a non-empty directory forgepatch did not create, an older output without a
marker) is refused with exit 2 unless ``--force``. Only ``DIR/sglang`` and the marker are
ever written; other entries of ``DIR`` are left alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from forgepatch.errors import BadInput
from forgepatch.infra.atomic import write_atomic
from forgepatch.infra.journal import STATE_DIR

MARKER = ".forgepatch-out"
PACKAGE = "sglang"
# a run's copy of DIR/sglang, staged beside it (``writer.write_out``) until it is swapped in
STAGING_PREFIX, STAGING_SUFFIX = ".sglang.", ".forgepatch"


@dataclass
class OutDir:
    path: Path
    existed: bool  # DIR existed and was not empty


def check(out: Path, force: bool = False, name: str = PACKAGE) -> OutDir:
    """Raise BadInput unless forgepatch may write ``out`` (see the module doc; ``name``: the
    package directory, ``sglang`` or another package's import name); writes nothing."""
    out = Path(out)
    PACKAGE = name  # noqa: N806 - the package directory this check is about
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out: {out} exists and is not a directory")
    entries = sorted(p.name for p in out.iterdir() if not _ours_in_flight(p.name)) if out.is_dir() else []
    if not entries or force:
        return OutDir(out, bool(entries))
    marker = out / MARKER
    if not marker.is_file():
        raise BadInput(f"--out: {out} is not empty and was not written by forgepatch (no {MARKER} in it); "
                       f"choose a new or empty directory, or pass --force to replace {out / PACKAGE}")
    try:
        record = json.loads(marker.read_text(encoding="utf-8"))
        files = record["files"]
        if not isinstance(files, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        raise BadInput(f"--out: {marker} is not a forgepatch record; pass --force to replace {out / PACKAGE}") from None
    unknown = _not_recorded(out / PACKAGE, files)
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise BadInput(f"--out: {out / PACKAGE / unknown[0]}{more} was added or changed since forgepatch wrote {out} "
                       f"and would be deleted; move it away, or pass --force")
    return OutDir(out, True)


def _ours_in_flight(name: str) -> bool:
    """A run's lock/state directory or staging copy (``writer``): not the user's content; a
    run holding ``DIR``'s lock finishes or undoes them before it checks again."""
    return name == STATE_DIR or (name.startswith(STAGING_PREFIX) and name.endswith(STAGING_SUFFIX))


def _not_recorded(package: Path, files: dict) -> list[str]:
    """Files under ``package`` that the record does not list with this size and mtime."""
    out = []
    if not package.is_dir():
        return out
    for rel, size, mtime in _walk(package):
        want = files.get(rel)
        if not (isinstance(want, list) and len(want) == 2 and want[0] == size and want[1] == mtime):
            out.append(rel)
    return sorted(out)


def _walk(package: Path):
    root = str(package)
    for dirpath, dirnames, filenames in os.walk(root):
        # bytecode Python writes when the output is imported is derived, not the user's
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            yield os.path.relpath(full, root).replace(os.sep, "/"), st.st_size, st.st_mtime_ns


def record_data(package: Path, meta: dict) -> bytes:
    """The marker's content for the files under ``package`` (an ``sglang/`` directory, maybe
    still staged: a rename keeps sizes and mtimes)."""
    files = {rel: [size, mtime] for rel, size, mtime in _walk(Path(package))}
    return (json.dumps({"written_by": "forgepatch", **meta, "files": files}, separators=(",", ":")) + "\n").encode()


def record(out: Path, meta: dict) -> int:
    """Write the marker listing every file now under ``out/sglang``; returns how many."""
    write_atomic(Path(out) / MARKER, record_data(Path(out) / PACKAGE, meta))
    return recorded(out)


def recorded(out: Path) -> int:
    """How many files the marker of ``out`` lists (0 without one)."""
    try:
        return len(json.loads((Path(out) / MARKER).read_text(encoding="utf-8"))["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0
