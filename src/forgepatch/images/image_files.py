"""The shared objects of an image's Python environments, read through the Docker engine API.

Nothing runs inside the image: a container is *created* (never started) so the engine's
archive endpoint can read its filesystem, and removed afterwards. The Python environments
are found from the image's own configuration — the usual prefixes (``/usr``,
``/usr/local``, ``/opt/conda``, ...), the parents of its ``PATH`` directories,
``VIRTUAL_ENV``/``CONDA_PREFIX`` and ``PYTHONPATH`` — each probed with a HEAD request for
``lib/python3.N/{site,dist}-packages``. Each environment found is streamed as one tar
archive; members that are not shared objects are skipped as the stream passes, and each
ELF shared object is spooled to a temporary file (the engine gives no random access into
an archive) so the fatbin reader can seek to its headers.
"""

from __future__ import annotations

import io
import posixpath
import shutil
import tarfile
import tempfile
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator

from forgepatch.errors import BadInput

PREFIXES = ("/usr", "/usr/local", "/opt/conda", "/opt/venv", "/venv", "/root/.local")
PY_MINORS = range(6, 16)
LEAVES = ("site-packages", "dist-packages")
SPOOL_IN_MEMORY = 64 << 20  # larger shared objects are spooled to disk
_SYMLINK = 1 << 27  # Go's os.ModeSymlink, as the engine reports a path's mode


def is_shared_object_name(name: str) -> bool:
    base = posixpath.basename(name)
    return base.endswith(".so") or ".so." in base


@dataclass
class Member:
    path: str  # absolute path inside the image
    size: int
    fileobj: io.IOBase  # seekable; valid until the next member is requested


def candidate_roots(env: dict[str, str]) -> list[str]:
    """Directories that may hold a Python environment, in a stable order."""
    prefixes = list(PREFIXES)
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME"):
        if env.get(var):
            prefixes.append(env[var].rstrip("/") or "/")
    for entry in env.get("PATH", "").split(":"):
        if entry.rstrip("/").endswith("/bin"):
            prefixes.append(posixpath.dirname(entry.rstrip("/")) or "/")
    roots = []
    for prefix in dict.fromkeys(posixpath.normpath(p) for p in prefixes):
        base = "" if prefix == "/" else prefix
        roots.append(f"{base}/lib/python3/dist-packages")
        roots += [f"{base}/lib/python3.{minor}/{leaf}" for minor in PY_MINORS for leaf in LEAVES]
    roots += [posixpath.normpath(p) for p in env.get("PYTHONPATH", "").split(":") if p.startswith("/")]
    return list(dict.fromkeys(roots))


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

    def python_roots(self) -> list[str]:
        """The Python environment directories that exist in the image (symlinks resolved,
        nested ones dropped)."""
        found: list[str] = []
        for root in candidate_roots(self.env):
            stat = self._stat(root)
            hops = 0
            while stat is not None and stat.get("mode", 0) & _SYMLINK and stat.get("linkTarget") and hops < 8:
                root = posixpath.normpath(posixpath.join(posixpath.dirname(root), stat["linkTarget"]))
                stat, hops = self._stat(root), hops + 1
            if stat is not None and stat.get("mode", 0) & (1 << 31):  # Go's os.ModeDir
                found.append(root)
        unique = sorted(set(found))
        return [r for r in unique if not any(r != o and r.startswith(o.rstrip("/") + "/") for o in unique)]

    def shared_objects(self, root: str, on_bytes: Callable[[int], None] | None = None) -> Iterator[Member]:
        """Each ELF shared object under ``root``, streamed once; non-ELF files named ``*.so``
        are skipped, as are links (the file they point to is read where it lives)."""
        chunks, _stat = self.api.get_archive(self.container, root)
        parent = posixpath.dirname(root.rstrip("/"))
        stream = io.BufferedReader(_ChunkReader(chunks, on_bytes), 1 << 20)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for info in tar:
                if not info.isreg() or not is_shared_object_name(info.name):
                    continue
                source = tar.extractfile(info)
                head = source.read(4)
                if head != b"\x7fELF":
                    continue
                with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
                    spool.write(head)
                    shutil.copyfileobj(source, spool, 1 << 20)
                    spool.seek(0)
                    yield Member(posixpath.join(parent, info.name), info.size, spool)


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
