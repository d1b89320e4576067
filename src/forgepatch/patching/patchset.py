"""Loading patch files: declarative ``<id>.toml`` arch gates or ``<id>.py`` custom codemods.

A patch declares id, summary, arches, its sites (located by symbol + marker, in the modules
they name), the gates it knowingly leaves alone (``ignore``, each with a reason) and
Fixit-style examples. Whether a site exists is decided by the tree (``required = false``
for a site some releases lack); ``applies_to`` (PEP 440 specifier over the upstream
version) is for semantic reasons only and says why in ``applies_to_reason``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forgepatch.arch import ARCHES
from forgepatch.errors import BadInput, located


@dataclass(frozen=True)
class Site:
    """One place a patch edits, found by symbol and marker, never by line."""

    name: str
    functions: tuple[str, ...]  # function/method names, alternatives for renames
    modules: tuple[str, ...] = ()  # package-relative globs: the site lives in one of these
    markers: tuple[str, ...] = ()  # code tokens (names, non-doc strings) one of which the site names
    required: bool = True  # absent -> drift; False: absent -> not-applicable
    applies_to: str | None = None  # PEP 440 specifier; None = whenever the patch applies
    applies_to_reason: str = ""  # why the version matters (reported with not-applicable)
    lone: bool = False  # arch-gate only: also widen a lone sm90/sm100 predicate
    anywhere: bool = False  # True: ``modules`` only order the search; any file may hold the site
    gates: str = "all"  # arch-gate: "all" gates of the feature in a site function, or exactly "one"


@dataclass(frozen=True)
class Ignore:
    """A gate the patch knowingly leaves rejecting the arch (reported as ``ignored``)."""

    function: str  # qualified ("Class.method") or bare function name
    reason: str
    module: str | None = None  # package-relative glob
    gate: str | None = None  # a substring of the gate's code, when the function has several

    def matches(self, file: str, symbol: str, gate: str) -> bool:
        import fnmatch

        if self.module and not fnmatch.fnmatch(file, self.module):
            return False
        if symbol != self.function and not symbol.endswith("." + self.function):
            return False
        return self.gate is None or " ".join(self.gate.split()) in " ".join(gate.split())


@dataclass(frozen=True)
class Example:
    """Fixit-style: ``before`` must become ``after`` (``after`` None = must stay unchanged)."""

    before: str
    after: str | None
    arch: str
    path: str = "example.py"  # package-relative path the snippet pretends to be
    context: tuple[tuple[str, str], ...] = ()  # other files of the pretend tree
    upstream: bool = False  # the snippet is pristine upstream (accepting gates = absorbed)
    name: str = ""
    # the example means the arch-gate codemod's fallback: no file of its tree provides the new
    # predicate, so a local helper is defined (as on 0.5.3). Without it, an example whose run
    # takes that path fails: its `context` most likely lacks the module the sibling comes from.
    fallback: bool = False


@dataclass
class Patch:
    id: str
    summary: str
    arches: tuple[str, ...]
    sites: tuple[Site, ...]
    codemod: Any  # a SiteCodemod class (see codemods/base.py)
    applies_to: str | None = None
    applies_to_reason: str = ""
    ignore: tuple[Ignore, ...] = ()
    examples: tuple[Example, ...] = ()
    path: Path | None = None
    hash: str = ""
    origin: str = ""  # where the library found it: shipped, user, user (overrides shipped)

    @property
    def covers_gates(self) -> bool:
        """Does the self-check look for this patch's feature gates left rejecting the arch?"""
        return bool(getattr(self.codemod, "covers_gates", False))

    def applies(self, version: str | None) -> bool:
        return _version_in(version, self.applies_to)

    def site_applies(self, site: Site, version: str | None) -> bool:
        return _version_in(version, site.applies_to)


def _version_in(version: str | None, spec: str | None) -> bool:
    if not spec or version is None:
        return True
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) in SpecifierSet(spec, prereleases=True)
    except InvalidVersion:
        return True


def patchset_hash(patches: list[Patch]) -> str:
    """Hash of the ordered patch files: identifies a patch series."""
    digest = hashlib.sha256()
    for p in patches:
        digest.update(p.id.encode() + b"\0" + p.hash.encode() + b"\0")
    return digest.hexdigest()[:16]


# -- parsing --------------------------------------------------------------------------------
_SITE_KEYS = {"name", "functions", "modules", "markers", "required", "applies_to", "applies_to_reason",
              "lone", "anywhere", "gates"}
_IGNORE_KEYS = {"function", "module", "gate", "reason"}
_EXAMPLE_KEYS = {"before", "after", "arch", "path", "context", "upstream", "name", "fallback"}
_PATCH_KEYS = {"id", "summary", "arches", "sites", "applies_to", "applies_to_reason", "ignore", "examples",
               "codemod"}


def _check_spec(spec: Any, where: str) -> str | None:
    if spec is None:
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(str(spec))
    except InvalidSpecifier:
        raise ValueError(f"{where}: invalid version specifier {spec!r}") from None
    return str(spec)


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where}: expected a list of strings")
    return tuple(value)


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string")
    return value


def _opt_str(value: Any, where: str) -> str | None:
    return None if value is None else _str(value, where)


def build_patch(data: dict[str, Any], codemod: Any, path: Path | None = None) -> Patch:
    """Validate a patch declaration (from TOML or a ``PATCH`` dict). Raises ValueError('key: msg')."""
    for key in ("id", "summary", "arches", "sites"):
        if key not in data:
            raise ValueError(f"{key}: missing")
    unknown = set(data) - _PATCH_KEYS
    if unknown:
        raise ValueError(f"{sorted(unknown)[0]}: unknown key")
    pid = data["id"]
    if not isinstance(pid, str) or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", pid):
        raise ValueError(f"id: {pid!r} must be lower-case letters, digits, '-', '.', '_'")
    if path is not None and path.stem != pid:
        raise ValueError(f"id: {pid!r} does not match the file name {path.name!r}")
    arches = _str_list(data["arches"], "arches")
    for a in arches:
        if a not in ARCHES:
            raise ValueError(f"arches: unknown arch {a!r} (known: {', '.join(ARCHES)})")
    sites = []
    for i, s in enumerate(data["sites"]):
        where = f"sites[{i}]"
        if not isinstance(s, dict):
            raise ValueError(f"{where}: expected a table")
        if set(s) - _SITE_KEYS:
            raise ValueError(f"{where}.{sorted(set(s) - _SITE_KEYS)[0]}: unknown key")
        if "name" not in s or "functions" not in s:
            raise ValueError(f"{where}: needs 'name' and 'functions'")
        if s.get("gates", "all") not in ("all", "one"):
            raise ValueError(f"{where}.gates: must be \"all\" or \"one\"")
        if s.get("anywhere") and not s.get("modules"):
            raise ValueError(f"{where}.anywhere: needs 'modules' (the search order)")
        sites.append(Site(
            name=str(s["name"]),
            functions=_str_list(s["functions"], f"{where}.functions"),
            modules=_str_list(s.get("modules", []), f"{where}.modules") if s.get("modules") else (),
            markers=_str_list(s.get("markers", []), f"{where}.markers") if s.get("markers") else (),
            required=bool(s.get("required", True)),
            applies_to=_check_spec(s.get("applies_to"), f"{where}.applies_to"),
            applies_to_reason=_str(s.get("applies_to_reason", ""), f"{where}.applies_to_reason"),
            lone=bool(s.get("lone", False)),
            anywhere=bool(s.get("anywhere", False)),
            gates=s.get("gates", "all"),
        ))
    if len({s.name for s in sites}) != len(sites):
        raise ValueError("sites: two sites share a name")
    ignore = []
    for i, g in enumerate(data.get("ignore", [])):
        where = f"ignore[{i}]"
        if not isinstance(g, dict):
            raise ValueError(f"{where}: expected a table")
        if set(g) - _IGNORE_KEYS:
            raise ValueError(f"{where}.{sorted(set(g) - _IGNORE_KEYS)[0]}: unknown key")
        if not isinstance(g.get("function"), str) or not g["function"]:
            raise ValueError(f"{where}.function: needed (the function holding the gate)")
        reason = g.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{where}.reason: needed (why the gate may keep rejecting the arch)")
        ignore.append(Ignore(g["function"], reason.strip(), _opt_str(g.get("module"), f"{where}.module"),
                             _opt_str(g.get("gate"), f"{where}.gate")))
    if not sites:
        raise ValueError("sites: a patch needs at least one site")
    examples = []
    for i, e in enumerate(data.get("examples", [])):
        where = f"examples[{i}]"
        if set(e) - _EXAMPLE_KEYS:
            raise ValueError(f"{where}.{sorted(set(e) - _EXAMPLE_KEYS)[0]}: unknown key")
        if "before" not in e:
            raise ValueError(f"{where}: needs 'before'")
        arch = e.get("arch", arches[0])
        if arch not in ARCHES:
            raise ValueError(f"{where}.arch: unknown arch {arch!r}")
        examples.append(Example(
            before=e["before"], after=e.get("after"), arch=arch, path=e.get("path", "example.py"),
            context=tuple(sorted((e.get("context") or {}).items())), upstream=bool(e.get("upstream", False)),
            name=e.get("name", f"example {i + 1}"), fallback=bool(e.get("fallback", False)),
        ))
    return Patch(
        id=pid, summary=str(data["summary"]), arches=arches, sites=tuple(sites), codemod=codemod,
        applies_to=_check_spec(data.get("applies_to"), "applies_to"),
        applies_to_reason=_str(data.get("applies_to_reason", ""), "applies_to_reason"),
        ignore=tuple(ignore), examples=tuple(examples), path=path,
    )


def _toml_patch(path: Path, text: str) -> Patch:
    from forgepatch.config import key_line, parse_toml
    from forgepatch.patching.codemods import declarative_codemod

    data = parse_toml(path, text)
    try:
        codemod = declarative_codemod(data.get("codemod", "arch-gate"))
        return build_patch(data, codemod, path)
    except ValueError as exc:
        key = str(exc).split(":", 1)[0]
        loc = tuple(re.sub(r"\[\d+\]", "", key).split("."))
        raise BadInput(located(path, key_line(text, loc), str(exc))) from None


def _py_patch(path: Path) -> Patch:
    spec = importlib.util.spec_from_file_location(f"forgepatch_patch_{path.stem.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise BadInput(located(path, exc.lineno, f"syntax error: {exc.msg}")) from None
    except Exception as exc:  # noqa: BLE001 - a broken patch file is bad input
        raise BadInput(located(path, None, f"cannot load patch: {type(exc).__name__}: {exc}")) from None
    data, codemod = getattr(module, "PATCH", None), getattr(module, "Codemod", None)
    if not isinstance(data, dict) or codemod is None:
        raise BadInput(located(path, None, "a .py patch must define PATCH (a dict) and Codemod (a SiteCodemod class)"))
    try:
        return build_patch(data, codemod, path)
    except ValueError as exc:
        raise BadInput(located(path, None, str(exc))) from None


def load_patch(path: Path) -> Patch:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read patch: {exc.strerror}") from None
    patch = _toml_patch(path, raw.decode("utf-8", "replace")) if path.suffix == ".toml" else _py_patch(path)
    patch.hash = hashlib.sha256(raw).hexdigest()
    return patch


def patch_files(patches) -> dict[str, Path]:
    """id -> file of every patch of ``patches`` (a ``PatchLibrary``: shipped + user, user ones
    overriding by id; or a directory: exactly its patches)."""
    from forgepatch.patching.library import as_library

    return as_library(patches).paths()


def load_patches(patches, ids: list[str]) -> list[Patch]:
    """Load the named patches, in series order (``patches``: a library or a directory)."""
    from forgepatch.patching.library import as_library

    library = as_library(patches)
    out = []
    for pid in ids:
        entry = library.files.get(pid)
        if entry is None:
            raise BadInput(library.missing(pid))
        patch = load_patch(entry.path)
        patch.origin = entry.origin_label
        out.append(patch)
    return out
