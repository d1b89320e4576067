"""Patches that are not libcst codemods: ``major-list`` (arch lists in Python files),
``text`` (anchored edits of ``.cu``/``.h``/``.json``/``.toml``/shell files) and
``add-files`` (files shipped next to the patch). One loader, one runner, shared by the
three kinds (``codemods/major_list.py``, ``textpatch.py``, ``addfiles.py``).

A kind's sites read and write through :class:`FileRun`: the tree as the series sees it
(earlier patches' edits over the source), every file of the package (not only ``.py``),
and each change recorded for the writer byte-exactly (a non-``.py`` file is bytes held as
text with ``surrogateescape``: every byte round-trips, line ends and all).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch.patching import fulltree
from forgepatch.patching.model import ApplyResult, Location, PatchResult, SiteResult, Status

KINDS = ("major-list", "text", "add-files")


def kind_class(name: str):
    if name == "major-list":
        from forgepatch.patching.codemods.major_list import MajorList

        return MajorList
    if name == "text":
        from forgepatch.patching.textpatch import TextPatch

        return TextPatch
    if name == "add-files":
        from forgepatch.patching.addfiles import AddFiles

        return AddFiles
    raise ValueError(f"codemod: unknown kind {name!r}")


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


def run_file_patch(patch, arch, version: str | None, overlay, pristine: bool, result: ApplyResult,
                   live) -> PatchResult:
    """Run a file patch's live sites (``live``: the sites whose ``applies_to`` holds)."""
    run = FileRun(patch, arch, version, overlay, pristine, result)
    kind = patch.codemod
    results = []
    for site in patch.sites:
        if site not in live:
            results.append(SiteResult(site.name, Status.NOT_APPLICABLE,
                                      detail=f"version {version} not in {site.applies_to}"))
            continue
        res = kind.run_site(run, site.name, patch.file_sites[site.name])
        if res.status is Status.DRIFT and not site.required:
            res = SiteResult(site.name, Status.NOT_APPLICABLE, detail=f"optional site: {res.detail}")
        results.append(res)
    return PatchResult(patch.id, patch.summary, Status.worst([s.status for s in results]), results, run.changes)


# -- loading ------------------------------------------------------------------------------
def build(data: dict[str, Any], kind_name: str, path: Path | None, raw: bytes) -> Any:
    """A ``Patch`` of a file kind from its TOML table. Raises ValueError('key: msg')."""
    from forgepatch.arch import ARCHES
    from forgepatch.patching import patchset as ps

    kind = kind_class(kind_name)
    for key in ("id", "summary", "arches", "sites"):
        if key not in data:
            raise ValueError(f"{key}: missing")
    ps._unknown(data, {"id", "summary", "arches", "sites", "applies_to", "applies_to_reason", "codemod", "package"}, "")
    pid = data["id"]
    import re

    if not isinstance(pid, str) or len(pid) > 100 or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", pid):
        raise ValueError(f"id: {ps._shown(pid)} must be lower-case letters, digits, '-', '.', '_'")
    if path is not None and path.stem != pid:
        raise ValueError(f"id: {pid!r} does not match the file name {path.name!r}")
    summary = ps._str(data["summary"], "summary", empty=False)
    arches = ps._str_list(data["arches"], "arches")
    for a in arches:
        if a not in ARCHES:
            raise ValueError(f"arches: unknown arch {ps._shown(a)} (known: {', '.join(ARCHES)})")
    package = ps.package_of(data)
    sites, specs, extra = [], {}, b""
    for i, table in enumerate(ps._tables(data["sites"], "sites")):
        where = f"sites[{i}]"
        ps._unknown(table, kind.KEYS | {"name", "required", "applies_to", "applies_to_reason"}, where)
        if "name" not in table:
            raise ValueError(f"{where}.name: missing")
        name = ps._str(table["name"], f"{where}.name", empty=False)
        spec = kind.parse_site(table, where, path)
        extra += getattr(spec, "digest", b"")
        sites.append(ps.Site(
            name=name, functions=tuple(getattr(spec, "functions", ())), modules=tuple(getattr(spec, "modules", ())),
            required=ps._bool(table.get("required"), f"{where}.required", True),
            applies_to=ps._check_spec(table.get("applies_to"), f"{where}.applies_to"),
            applies_to_reason=ps._str(table.get("applies_to_reason", ""), f"{where}.applies_to_reason")))
        specs[name] = spec
    if not sites:
        raise ValueError("sites: a patch needs at least one site")
    if len(specs) != len(sites):
        raise ValueError("sites: two sites share a name")
    patch = ps.Patch(id=pid, summary=summary, arches=arches, sites=tuple(sites), codemod=kind,
                     applies_to=ps._check_spec(data.get("applies_to"), "applies_to"),
                     applies_to_reason=ps._str(data.get("applies_to_reason", ""), "applies_to_reason"),
                     path=path, package=package, file_sites=specs)
    # the patch's identity covers what it carries (added files), not only its TOML
    patch.hash = hashlib.sha256(raw + extra).hexdigest()
    return patch


def close_paths(want: str, paths: list[str], n: int = 3) -> list[str]:
    """Files of the package most like ``want``: same base name first, then close names."""
    import difflib
    import posixpath

    base = posixpath.basename(want)
    same = [p for p in paths if posixpath.basename(p) == base and p != want]
    near = difflib.get_close_matches(want, [p for p in paths if p not in same], n=n, cutoff=0.6)
    return (same + near)[:n]
