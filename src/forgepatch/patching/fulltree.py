"""Every file of a package, not only its ``.py`` files: what text patches and added files read.

The engine's trees list ``.py`` files (codemods parse them). A text patch edits a ``.cu`` or
``.json`` file and an added file must be compared with what upstream ships at its name, so
the tree of a source also answers for its other files: on disk for a directory source, from
the wheel for a PyPI release (the cache extracts only ``.py`` files).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from forgepatch.patching.trees import DirTree


class PackageTree(DirTree):
    """A source's package directory; its non-``.py`` files also come from ``wheel``."""

    def __init__(self, package: Path, pristine: bool = False, wheel: Path | None = None) -> None:
        super().__init__(package, pristine)
        self.wheel = wheel
        self._zip: zipfile.ZipFile | None = None
        self._all: list[str] | None = None

    def _members(self) -> dict[str, zipfile.ZipInfo]:
        if self.wheel is None:
            return {}
        if self._zip is None:
            self._zip = zipfile.ZipFile(self.wheel)
        top = self.package.name + "/"
        return {i.filename[len(top):]: i for i in self._zip.infolist()
                if i.filename.startswith(top) and not i.is_dir() and ".." not in i.filename.split("/")}

    def all_paths(self) -> list[str]:
        """Every file of the package (package-relative, POSIX), sorted."""
        if self._all is None:
            out = set(self._members())
            root = str(self.package)
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = [d for d in dirnames if d not in ("__pycache__",) and not d.startswith(".forgepatch")]
                rel = os.path.relpath(dirpath, root)
                out.update(f if rel == "." else f"{rel}/{f}".replace(os.sep, "/") for f in filenames)
            self._all = sorted(out)
        return self._all

    def read_any(self, rel: str) -> bytes | None:
        """The bytes of any file of the package, or None when it has no such file."""
        if (self.package / rel).is_file():
            return self.read(rel)
        info = self._members().get(rel)
        return None if info is None else self._zip.read(info)


def all_paths(tree) -> list[str]:
    """Every file of ``tree`` (a tree without the notion: its ``paths()``)."""
    fn = getattr(tree, "all_paths", None)
    return fn() if fn is not None else tree.paths()


def read_any(tree, rel: str) -> bytes | None:
    """Any file of ``tree`` or None (trees without the notion: ``read``, None when absent)."""
    fn = getattr(tree, "read_any", None)
    if fn is not None:
        return fn(rel)
    if rel not in tree.paths():
        return None
    return tree.read(rel)
