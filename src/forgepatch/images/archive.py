"""Deterministic tar archives for build contexts: the context itself as a tar stream, and the
pin's unpatched package as ONE gzipped tar (cached per upstream tree between builds).

Entries are sorted, modes normalised, mtimes and owners fixed, so the same inputs give the
same bytes on every machine. ``.git``, ``__pycache__`` and bytecode are never archived.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from forgepatch.infra.atomic import write_atomic

FIXED_MTIME = 946684800  # 2000-01-01T00:00:00Z: fixed, and valid for zip-based tools
GZIP_LEVEL = 6


class Sink:
    """A write-only file object that hands out what was written."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        self.size += len(data)
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts, self.size = [], 0
        return out


def tarinfo(name: str, mode: int, size: int = 0, is_dir: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime, info.mode, info.size = FIXED_MTIME, mode, size
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if is_dir:
        info.type = tarfile.DIRTYPE
    return info


def skip(name: str) -> bool:
    return name in ("__pycache__", ".git") or name.endswith((".pyc", ".pyo"))


def package_files(package: Path) -> dict[str, str]:
    """Package-relative POSIX path -> absolute file path, sorted; symlinks are followed."""
    out: dict[str, str] = {}
    stack = [(str(package), "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as it:
            for entry in it:
                if skip(entry.name):
                    continue
                if entry.is_dir():
                    stack.append((entry.path, prefix + entry.name + "/"))
                elif entry.is_file():
                    out[prefix + entry.name] = entry.path
    return dict(sorted(out.items()))


def read_file(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def package_tar(files: dict[str, bytes], prefix: str = "sglang") -> bytes:
    """A package as one deterministic tar (``prefix/rel`` members, sorted, fixed metadata)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        dirs = sorted({"/".join(rel.split("/")[:i]) for rel in files for i in range(1, rel.count("/") + 1)})
        tar.addfile(tarinfo(prefix, 0o755, is_dir=True))
        for d in dirs:
            tar.addfile(tarinfo(f"{prefix}/{d}", 0o755, is_dir=True))
        for rel, data in sorted(files.items()):
            tar.addfile(tarinfo(f"{prefix}/{rel}", 0o644, len(data)), io.BytesIO(data))
    return buf.getvalue()


@dataclass
class StagedFile:
    """One file of a context: its content, or the file it is copied from at write time."""

    data: bytes | None  # content, or None when it is read from ``path`` at write time
    path: str | None
    mode: int
    size: int
    sha256: str


def upstream_tar(package: Path, cache: Path | None, scan: Callable[[bytes, object], None],
                 prefix: str = "sglang") -> tuple[StagedFile, dict[str, str]]:
    """The unpatched package as one tar (``prefix/rel`` members), and {rel: sha256} of its files.

    Cached in ``cache`` under a key made of the tree's path, file names, sizes and mtimes, so
    an unchanged upstream tree (a downloaded release) is read and packed only once."""
    files = package_files(package)
    stamp = hashlib.sha256(str(Path(package).resolve()).encode())
    if prefix != "sglang":  # (sglang's key stays what it was: its cached tars stay valid)
        stamp.update(f"prefix={prefix}\n".encode())
    for rel, path in files.items():
        st = os.stat(path)
        stamp.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    key = stamp.hexdigest()[:32]
    tar_path, meta_path = (Path(cache, key + ".tar.gz"), Path(cache, key + ".json")) if cache else (None, None)
    if tar_path is not None:
        try:
            meta = json.loads(meta_path.read_text())
            if os.path.getsize(tar_path) == meta["size"]:
                return StagedFile(None, str(tar_path), 0o644, meta["size"], meta["sha256"]), meta["files"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    contents, shas = {}, {}
    for rel, path in files.items():
        data = read_file(path)
        scan(data, path)
        contents[rel] = data
        shas[rel] = hashlib.sha256(data).hexdigest()
    tar = package_tar(contents, prefix)
    # Identity = sha256 of the uncompressed tar: gzip bytes may differ between zlib builds,
    # the package may not (so tags agree across machines).
    identity = hashlib.sha256(tar).hexdigest()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=GZIP_LEVEL, mtime=0, filename="") as gz:
        gz.write(tar)
    tar = buf.getvalue()
    tar_file = StagedFile(tar, None, 0o644, len(tar), identity)
    if tar_path is not None:
        write_atomic(tar_path, tar, mode=0o644, mtime=FIXED_MTIME)
        meta = {"sha256": tar_file.sha256, "size": tar_file.size, "files": shas}
        write_atomic(meta_path, json.dumps(meta).encode(), mode=0o644, mtime=FIXED_MTIME)
    return tar_file, shas
