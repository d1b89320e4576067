"""Read-only package trees the engine works on (see ``model.Tree``)."""

from __future__ import annotations

import os
from pathlib import Path

from forgepatch.errors import BadInput
from forgepatch.infra.journal import STATE_DIR
from forgepatch.paths import check_path


class DirTree:
    """An ``sglang/`` directory on disk."""

    def __init__(self, package: Path, pristine: bool = False) -> None:
        self.package = Path(package)
        self.pristine = pristine
        self._paths: list[str] | None = None

    def paths(self) -> list[str]:
        if self._paths is None:
            root = str(self.package)
            out = []
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", STATE_DIR))
                rel = os.path.relpath(dirpath, root)
                for f in filenames:
                    if f.endswith(".py"):
                        out.append(f if rel == "." else f"{rel}/{f}".replace(os.sep, "/"))
            self._paths = sorted(out)
        return self._paths

    def read(self, rel: str) -> bytes:
        try:
            return _read_regular(os.path.join(self.package, rel))  # str paths: a scan reads every file
        except OSError as exc:
            import errno

            if exc.errno == errno.ENOENT and not os.path.islink(self.package / rel):
                raise  # no such file: callers probing the tree ask for that
            check_path(self.package / rel, "source tree", "file")  # names a loop, a dangling link, ...
            raise BadInput(f"source tree: {self.package / rel}: cannot read: {exc.strerror}") from None

    def key(self, rel: str) -> str | None:
        return None

    def display(self, rel: str) -> str:
        return str(self.package / rel)


def _read_regular(path: str) -> bytes:
    """A regular file's bytes: opened without blocking on a FIFO or device (O_NONBLOCK is
    meaningless for a regular file), anything but a regular file refused."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(21, "not a regular file", path)
        chunks = [os.read(fd, st.st_size + 1)]
        while chunks[-1]:  # a file that grew since the fstat
            chunks.append(os.read(fd, 1 << 20))
        return b"".join(chunks)
    finally:
        os.close(fd)


class MemoryTree:
    """Files in memory (patch examples, tests)."""

    def __init__(self, files: dict[str, str], pristine: bool = False) -> None:
        self.files = dict(files)
        self.pristine = pristine

    def paths(self) -> list[str]:
        return sorted(self.files)

    def read(self, rel: str) -> bytes:
        return self.files[rel].encode("utf-8")

    def key(self, rel: str) -> str | None:
        return None

    def display(self, rel: str) -> str:
        return rel


class OverlayTree:
    """A tree with some files replaced (a series' result over its source, in memory)."""

    def __init__(self, base, changes: dict[str, str | bytes], pristine: bool = False) -> None:
        self.base, self.changes, self.pristine = base, dict(changes), pristine

    def paths(self) -> list[str]:
        return sorted(set(self.base.paths()) | set(self.changes))

    def read(self, rel: str) -> bytes:
        if rel not in self.changes:
            return self.base.read(rel)
        data = self.changes[rel]  # bytes (a file's own encoding) or text (UTF-8)
        return data if isinstance(data, bytes) else data.encode("utf-8")

    def key(self, rel: str) -> str | None:
        return None

    def display(self, rel: str) -> str:
        return rel
