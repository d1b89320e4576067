"""What a file kind's sites work with (``major-list``, ``text``, ``add-files``): the tree as
the series sees it (:class:`FileRun`: earlier patches' edits over the source, every file of
the package, not only ``.py``, each change recorded for the writer byte-exactly: a non-``.py``
file is bytes held as text with ``surrogateescape``, every byte round-trips, line ends and
all), a site's result from its locations, and the files most like a name that is missing."""

from __future__ import annotations

import difflib
import posixpath
from dataclasses import dataclass, field
from typing import Any

from forgepatch.patching import fulltree
from forgepatch.patching.model import ApplyResult, Location, SiteResult, Status


class RawText:
    """How a non-``.py`` file is held: its bytes as text (``surrogateescape``), written
    back to exactly the same bytes outside the edit."""

    encoding = "utf-8"

    @staticmethod
    def decode(data: bytes) -> str:
        return data.decode("utf-8", "surrogateescape")

    def encode(self, text: str) -> bytes:
        return text.encode("utf-8", "surrogateescape")


RAW = RawText()


@dataclass
class FileRun:
    """One file patch's run over the series' overlay (``engine._Overlay``)."""

    patch: Any
    arch: Any
    version: str | None
    overlay: Any
    pristine: bool
    result: ApplyResult
    changes: dict[str, str] = field(default_factory=dict)

    @property
    def major(self) -> int:
        return self.arch.cc[0]

    def paths(self) -> list[str]:
        """Every file of the package as the series sees it (files earlier patches added too)."""
        return sorted(set(fulltree.all_paths(self.overlay.tree)) | set(self.overlay.texts))

    def read(self, rel: str) -> str | None:
        """The file's text as the series sees it, or None when the package has no such file."""
        if rel in self.overlay.texts:
            return self.overlay.texts[rel]
        if rel.endswith(".py"):
            try:
                return self.overlay.read_text(rel)
            except FileNotFoundError:
                return None
        data = fulltree.read_any(self.overlay.tree, rel)
        return None if data is None else RAW.decode(data)

    def touched(self, rel: str) -> bool:
        """Did an earlier patch of the series change (or add) this file?"""
        return rel in self.overlay.texts

    def settled(self, rel: str) -> Status:
        """The status of a place already in the patched state: absorbed upstream on a
        pristine tree no earlier patch touched, else already-applied."""
        return Status.ABSORBED if self.pristine and not self.touched(rel) else Status.ALREADY

    def write(self, rel: str, new_text: str) -> None:
        """Record ``new_text`` as the file's next state (nothing is written to disk here)."""
        old = self.read(rel)
        if rel.endswith(".py") and old is not None:
            self.overlay.check_writable(rel, new_text)
            if rel in self.overlay.sources:
                self.result.sources.setdefault(rel, self.overlay.sources[rel])
        else:
            self.result.sources.setdefault(rel, RAW)
        self.result.originals.setdefault(rel, old)
        self.overlay.texts[rel] = new_text
        self.changes[rel] = new_text

    def display(self, rel: str) -> str:
        return self.overlay.display(rel)


def site_result(name: str, locations: list[Location], candidates: list[str] | None = None,
                detail: str = "") -> SiteResult:
    status = Status.worst([loc.status for loc in locations]) if locations else Status.DRIFT
    first = next((loc for loc in locations if loc.status is status), None)
    if first is None:
        return SiteResult(name, status, detail=detail, candidates=candidates or [])
    return SiteResult(name, status, first.file, first.line, first.symbol,
                      detail or "; ".join(dict.fromkeys(loc.detail for loc in locations if loc.status is status)),
                      candidates=candidates or [], locations=locations)


def close_paths(want: str, paths: list[str], n: int = 3) -> list[str]:
    """Files of the package most like ``want``: same base name first, then close names."""
    base = posixpath.basename(want)
    same = [p for p in paths if posixpath.basename(p) == base and p != want]
    near = difflib.get_close_matches(want, [p for p in paths if p not in same], n=n, cutoff=0.6)
    return (same + near)[:n]
