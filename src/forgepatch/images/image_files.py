"""Where an image's ``python3`` imports from, and the shared objects there, read through the
Docker engine API.

Nothing runs inside the image: a container is *created* (never started) so the engine's
archive endpoint can read its filesystem, and removed afterwards. The Python environments
are found from the image's own configuration — the usual prefixes (``/usr``,
``/usr/local``, ``/opt/conda``, ...), the parents of its ``PATH`` directories,
``VIRTUAL_ENV``/``CONDA_PREFIX`` and ``PYTHONPATH`` — each probed with HEAD requests for
``lib/python3.N/{site,dist}-packages`` (symlinks resolved, so ``/lib`` on a merged-/usr
system is not read twice). The directories their ``.pth`` files add are imported from as
well (``site`` reads each environment's own ``.pth`` files: a line is a directory, relative
to the environment; an ``import`` line runs code and is not followed): ``ImportPaths`` is
that one notion, and ``ImageFiles.import_members`` walks it for both audits (the kernels'
shared objects, FlashInfer's JIT lists). Each directory is streamed as one tar archive;
members that are not shared objects are skipped as the stream passes, and each ELF shared
object is spooled to a temporary file (the engine gives no random access into an archive) so
the fatbin reader can seek to its headers.
"""

from __future__ import annotations

import io
import posixpath
import shutil
import tarfile
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

from forgepatch.errors import BadInput

PREFIXES = ("/usr", "/usr/local", "/opt/conda", "/opt/venv", "/venv", "/root/.local")
PY_MINORS = range(6, 16)
LEAVES = ("site-packages", "dist-packages")
SPOOL_IN_MEMORY = 64 << 20  # larger shared objects are spooled to disk
TEXT_LIMIT = 4 << 20  # other files read while streaming (sources, .pth) are kept up to this size
_SYMLINK = 1 << 27  # Go's os.ModeSymlink, as the engine reports a path's mode
_DIR = 1 << 31  # Go's os.ModeDir


def is_shared_object_name(name: str) -> bool:
    base = posixpath.basename(name)
    return base.endswith(".so") or ".so." in base


def pth_dirs(files: Mapping[str, bytes | None], roots: list[str]) -> tuple[list[str], list[str]]:
    """The directories the roots' own ``.pth`` files (of ``files``: path -> bytes, None when
    unread) add, relative lines resolved against the root, in ``site``'s order (files sorted by
    name, first seen wins), and the ``.pth`` files that run code (``import`` lines, or unread),
    which are not followed."""
    dirs, code = [], []
    for root in roots:
        for path in sorted(p for p in files if p.endswith(".pth") and posixpath.dirname(p) == root):
            data = files[path]
            if data is None:
                code.append(path)
                continue
            for line in data.decode("utf-8", "replace").splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith(("import ", "import\t")):
                    code.append(path)
                    continue
                dirs.append(posixpath.normpath(posixpath.join(root, line)))
    return list(dict.fromkeys(dirs)), list(dict.fromkeys(code))


def _inside(path: str, dirs: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


@dataclass
class ImportPaths:
    """Where ``python3`` imports from in an image, read statically: its Python environments
    (``ImageFiles.python_roots``) and the directories their ``.pth`` files add outside them
    (``added``, symlinks resolved, existing directories only), known once the environments
    were streamed (``ImageFiles.import_members``); ``code``: the ``.pth`` files that run code,
    not followed."""

    roots: list[str]
    added: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)

    @property
    def dirs(self) -> list[str]:
        return self.roots + self.added


@dataclass
class Member:
    path: str  # absolute path inside the image
    size: int
    fileobj: io.IOBase  # seekable; valid until the next member is requested


def candidate_prefixes(env: dict[str, str]) -> list[str]:
    """Installation prefixes that may hold Python environments, in a stable order."""
    prefixes = list(PREFIXES)
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME"):
        if env.get(var):
            prefixes.append(env[var])
    for entry in env.get("PATH", "").split(":"):
        if entry.rstrip("/").endswith("/bin"):
            prefixes.append(posixpath.dirname(entry.rstrip("/")) or "/")
    return list(dict.fromkeys(posixpath.normpath(p) for p in prefixes if p.startswith("/")))


class ImageFiles:
    """Context manager over a created (never started) container of ``image``."""

    def __init__(self, api, image: str):
        from docker.errors import APIError, ImageNotFound

        self.api, self.image = api, image
        try:
            info = api.inspect_image(image)
        except ImageNotFound:
            raise BadInput(f"--image: {image!r} is not in the local Docker engine (`docker pull` or build it first)") from None
        except APIError as exc:
            raise BadInput(f"--image: {image!r}: {exc.explanation or exc}") from None
        self.image_id = info["Id"]
        config = info.get("Config") or {}
        self.env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
        self.container: str | None = None
        self._stats: dict[str, dict | None] = {}

    def __enter__(self) -> "ImageFiles":
        created = self.api.create_container(
            self.image_id, command=["/forgepatch-audit: never started"], entrypoint=[],
            name=f"forgepatch-audit-{uuid.uuid4().hex[:12]}", network_disabled=True,
            labels={"forgepatch.audit": "1"},
        )
        self.container = created["Id"]
        return self

    def __exit__(self, *exc) -> None:
        if self.container:
            self.api.remove_container(self.container, force=True, v=True)
            self.container = None

    def _stat(self, path: str) -> dict | None:
        from docker.utils import decode_json_header

        res = self.api.head(self.api._url("/containers/{0}/archive", self.container), params={"path": path})
        if res.status_code == 404:
            return None
        self.api._raise_for_status(res)
        header = res.headers.get("x-docker-container-path-stat")
        return decode_json_header(header) if header else {}

    def _realpath(self, path: str, depth: int = 0) -> str | None:
        """``path`` with every symlinked component resolved (``/lib`` -> ``/usr/lib`` on
        merged-/usr systems), or None when it does not exist."""
        parts = [p for p in path.split("/") if p]
        current = "/"
        for i, part in enumerate(parts):
            candidate = posixpath.join(current, part)
            stat = self._stat_cached(candidate)
            if stat is None:
                return None
            target = stat.get("linkTarget") if stat.get("mode", 0) & _SYMLINK else None
            if target:
                if depth >= 16:
                    return None
                rest = "/".join(parts[i + 1:])
                resolved = posixpath.normpath(posixpath.join(current, target, rest))
                return self._realpath(resolved, depth + 1)
            current = candidate
        return current

    def _stat_cached(self, path: str) -> dict | None:
        if path not in self._stats:
            self._stats[path] = self._stat(path)
        return self._stats[path]

    def python_roots(self) -> list[str]:
        """The Python environment directories that exist in the image: for each prefix's
        real ``lib`` directory, ``python3/dist-packages`` and ``python3.N/{site,dist}-packages``,
        plus ``PYTHONPATH`` entries; symlinks resolved, nested and repeated ones dropped."""
        found: set[str] = set()
        libs = {self._realpath(posixpath.join(p, "lib")) for p in candidate_prefixes(self.env)}
        for lib in sorted(lib for lib in libs if lib):
            for sub in ["python3"] + [f"python3.{minor}" for minor in PY_MINORS]:
                base = posixpath.join(lib, sub)
                if self._stat_cached(base) is None:
                    continue
                for leaf in LEAVES if sub != "python3" else ("dist-packages",):
                    found.add(self._realpath(posixpath.join(base, leaf)) or "")
        for entry in self.env.get("PYTHONPATH", "").split(":"):
            if entry.startswith("/"):
                found.add(self._realpath(posixpath.normpath(entry)) or "")
        dirs = sorted(r for r in found if r and (self._stat_cached(r) or {}).get("mode", 0) & _DIR)
        return [r for r in dirs if not any(r != o and r.startswith(o.rstrip("/") + "/") for o in dirs)]

    def shared_objects(self, root: str, on_bytes: Callable[[int], None] | None = None,
                       keep: Callable[[str], bool] | None = None,
                       on_file: Callable[[str, bytes | None], None] | None = None,
                       elf: bool = True) -> Iterator[Member]:
        """Each ELF shared object under ``root``, streamed once; non-ELF files named ``*.so``
        are skipped, as are links (the file they point to is read where it lives). Other
        regular files whose absolute path ``keep`` accepts are handed to ``on_file`` as they
        pass (their bytes; None for one over ``TEXT_LIMIT``); ``elf=False`` yields no shared
        object (only the files kept)."""
        chunks, _stat = self.api.get_archive(self.container, root)
        parent = posixpath.dirname(root.rstrip("/"))
        stream = io.BufferedReader(_ChunkReader(chunks, on_bytes), 1 << 20)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for info in tar:
                if not info.isreg():
                    continue
                path = posixpath.join(parent, info.name)
                if not elf or not is_shared_object_name(info.name):
                    if keep is not None and on_file is not None and keep(path):
                        on_file(path, tar.extractfile(info).read() if info.size <= TEXT_LIMIT else None)
                    continue
                source = tar.extractfile(info)
                head = source.read(4)
                if head != b"\x7fELF":
                    continue
                with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
                    spool.write(head)
                    shutil.copyfileobj(source, spool, 1 << 20)
                    spool.seek(0)
                    yield Member(path, info.size, spool)

    def import_members(self, paths: ImportPaths, on_bytes: Callable[[int], None] | None = None,
                       keep: Callable[[str], bool] | None = None,
                       on_file: Callable[[str, bytes | None], None] | None = None) -> Iterator[Member]:
        """Each ELF shared object where ``python3`` imports from (``shared_objects``, the same
        ``keep``/``on_file``): the environments ``paths.roots`` first, then the directories
        their ``.pth`` files add outside them, which this fills in (``paths.added``,
        ``paths.code``) once the environments were read. A directory inside another one read is
        not read again."""
        pths: dict[str, bytes | None] = {}

        def keep_also(path: str) -> bool:
            return path.endswith(".pth") and posixpath.dirname(path) in paths.roots or bool(keep and keep(path))

        def on_file_also(path: str, data: bytes | None) -> None:
            if path.endswith(".pth") and posixpath.dirname(path) in paths.roots:
                pths[path] = data
            if keep is not None and on_file is not None and keep(path):
                on_file(path, data)

        for root in paths.roots:
            yield from self.shared_objects(root, on_bytes, keep_also, on_file_also)
        dirs, paths.code = pth_dirs(pths, paths.roots)
        for d in dirs:
            real = self._realpath(d) if not _inside(d, paths.roots) else None
            if real is None or not (self._stat_cached(real) or {}).get("mode", 0) & _DIR:
                continue
            if not _inside(real, paths.roots) and real not in paths.added:
                paths.added.append(real)
        streamed: list[str] = []
        for d in sorted(paths.added, key=len):  # outer directories first: an inner one is in their stream
            if not _inside(d, streamed):
                streamed.append(d)
                yield from self.shared_objects(d, on_bytes, keep, on_file)

    def realpath(self, path: str) -> str | None:
        """``path`` in the image with its symlinks resolved; None when it does not exist."""
        return self._realpath(posixpath.normpath(path))


class _ChunkReader(io.RawIOBase):
    """A file over the engine's generator of byte chunks."""

    def __init__(self, chunks, on_bytes=None):
        self._chunks, self._buf, self._on_bytes = iter(chunks), memoryview(b""), on_bytes

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:
        while not len(self._buf):
            try:
                chunk = next(self._chunks)
            except StopIteration:
                return 0
            self._buf = memoryview(chunk)
            if self._on_bytes:
                self._on_bytes(len(chunk))
        n = min(len(target), len(self._buf))
        target[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n
