"""``codemod = "add-files"``: files a patch ships in a directory next to it (device-named
Triton MoE configs, ``E=...,N=...,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json``).

A site copies every file under ``from`` (a directory beside the patch file, default
``<id>.files``) into ``to`` (a package-relative directory that must exist in the tree,
unless ``create = true``). Per file: absent -> ``applied``; the same bytes already there ->
``already-applied`` (``absorbed-upstream`` on a pristine upstream tree); different bytes at
that name -> ``review`` (exit 1, nothing written: never a silent overwrite). The files are
read when the patch loads and are part of its hash; a ``.json`` file must parse (file:line).
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forgepatch.errors import BadInput
from forgepatch.patching.filesite import RAW, close_paths, site_result
from forgepatch.patching.model import Location, SiteResult, Status
from forgepatch.patching.patchkeys import one_bool, one_str
from forgepatch.patching.textpatch import _rel_path

MAX_FILES = 10_000


@dataclass(frozen=True)
class AddSite:
    to: str
    files: tuple[tuple[str, bytes], ...]  # (path under `to`, bytes)
    create: bool = False
    source: str = ""  # the directory they came from (for messages)

    @property
    def digest(self) -> bytes:
        h = hashlib.sha256()
        for rel, data in self.files:
            h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
        return self.to.encode() + b"\0" + h.digest()


class AddFiles:
    file_patch = True
    KIND = "add-files"
    covers_gates = False
    KEYS = {"from", "to", "create"}

    @staticmethod
    def parse_site(table: dict[str, Any], where: str, path: Path | None) -> AddSite:
        if "to" not in table:
            raise ValueError(f"{where}.to: missing (the package-relative directory the files go to)")
        to = _rel_path(one_str(table["to"], f"{where}.to", empty=False).rstrip("/"), f"{where}.to")
        create = one_bool(table.get("create"), f"{where}.create", False)
        if path is None:
            raise ValueError(f"{where}.from: an add-files patch is a file (its files lie next to it)")
        name = _rel_path(one_str(table.get("from", f"{path.stem}.files"), f"{where}.from", empty=False), f"{where}.from")
        root = path.parent / name
        if root.is_symlink() or not root.is_dir():
            raise ValueError(f"{where}.from: {root} is not a directory next to the patch")
        return AddSite(to, tuple(_read_files(root)), create, str(root))

    @staticmethod
    def run_site(run, name: str, spec: AddSite) -> SiteResult:
        paths = run.paths()
        if not spec.create and not any(p.startswith(spec.to + "/") for p in paths):
            dirs = sorted({posixpath.dirname(p) for p in paths})
            return SiteResult(name, Status.DRIFT, detail=f"{spec.to}/: no such directory in the package "
                              "(set create = true to make it)", candidates=close_paths(spec.to, dirs))
        locations = []
        writes = []
        for rel, data in spec.files:
            target = f"{spec.to}/{rel}"
            have = run.read(target)
            have_bytes = None if have is None else (run.result.encode(target, have) if target in run.result.sources
                                                    else RAW.encode(have))
            if have_bytes is None:
                locations.append(Location(Status.APPLIED, target, None, None, f"added ({len(data)} bytes)"))
                writes.append((target, RAW.decode(data)))
            elif have_bytes == data:
                locations.append(Location(run.settled(target), target, None, None, "the same file is there"))
            else:
                locations.append(Location(
                    Status.REVIEW, target, None, None,
                    f"upstream ships a different {posixpath.basename(target)} (sha256 {_sha(have_bytes)}; the "
                    f"patch's {_sha(data)}): compare them, then drop the patch's copy or rename it; nothing is overwritten"))
        if not any(loc.status is Status.REVIEW for loc in locations):
            for target, text in writes:
                run.write(target, text)
        return site_result(name, locations)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def _read_files(root: Path) -> list[tuple[str, bytes]]:
    """Every regular file under ``root`` (sorted; links and special files refused)."""
    import os

    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                raise ValueError(f"from: {os.path.join(dirpath, d)} is a link (only regular files are added)")
        for f in sorted(filenames):
            full = Path(dirpath, f)
            if full.is_symlink() or not full.is_file():
                raise ValueError(f"from: {full} is not a regular file")
            rel = full.relative_to(root).as_posix()
            data = full.read_bytes()
            if rel.endswith(".json"):
                _check_json(full, data)
            out.append((rel, data))
            if len(out) > MAX_FILES:
                raise ValueError(f"from: more than {MAX_FILES} files under {root}")
    if not out:
        raise ValueError(f"from: {root} holds no files")
    return out


def _check_json(path: Path, data: bytes) -> None:
    import json

    try:
        json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise BadInput(f"{path}:{line}: not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
