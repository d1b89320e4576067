"""Loading patch files: declarative ``<id>.toml`` arch gates or ``<id>.py`` custom codemods.

A patch declares id, summary, arches, its sites (located by symbol + marker, in the modules
they name), the gates it knowingly leaves alone (``ignore``, each with a reason) and
Fixit-style examples. Whether a site exists is decided by the tree (``required = false``
for a site some releases lack); ``applies_to`` (PEP 440 specifier over the upstream
version) is for semantic reasons only and says why in ``applies_to_reason``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch.arch import ARCHES
from forgepatch.errors import BadInput, located
from forgepatch.infra.tomlfile import decode_utf8, key_line, parse_toml
from forgepatch.patching import filepatch, guard
from forgepatch.patching.codemods import declarative_codemod
from forgepatch.patching.library import as_library
from forgepatch.patching.patchkeys import (
    no_unknown_keys, one_bool, one_str, opt_str, package_of, shown, str_list, table_list, version_spec,
)
from forgepatch.paths import check_path


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
    # arch-gate: only gates inside an enclosing branch (``if``/``elif``/``while`` test), ``with``
    # or call that names one of these markers (e.g. the ``model_arch`` branch of one model)
    within: tuple[str, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()  # the codemod's own keys (its ``site_keys``), checked

    def option(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)


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
    codemod_line: int | None = None  # a .py patch: the line defining Codemod
    origin: str = ""  # where the library found it: shipped, user, user (overrides shipped)
    package: str = "sglang"  # the package it patches (``forgepatch.packages``)
    file_sites: dict[str, Any] = field(default_factory=dict)  # a file kind's parsed sites (``filepatch``)

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
              "lone", "anywhere", "gates", "within"}
_IGNORE_KEYS = {"function", "module", "gate", "reason"}
_EXAMPLE_KEYS = {"before", "after", "arch", "path", "context", "upstream", "name", "fallback"}
_PATCH_KEYS = {"id", "summary", "arches", "sites", "applies_to", "applies_to_reason", "ignore", "examples",
               "codemod", "package"}


def example_path(value: Any, where: str) -> str:
    """A package-relative ``.py`` path that stays inside the example's pretend tree."""
    from pathlib import PurePosixPath

    text = one_str(value, where, empty=False)
    parts = PurePosixPath(text).parts
    if (len(text) > 255 or "\\" in text or "\0" in text or text.startswith("/") or ".." in parts
            or any(p in ("", ".") for p in text.split("/")) or not text.endswith(".py")):
        raise ValueError(f"{where}: {shown(text)} must be a relative path to a .py file inside the example "
                         "(no '..', no leading '/')")
    return text


def build_patch(data: dict[str, Any], codemod: Any, path: Path | None = None) -> Patch:
    """Validate a patch declaration (from TOML or a ``PATCH`` dict). Raises ValueError('key: msg').

    Strict: wrong types are refused (no coercion of "false" to true), empty arrays too,
    unknown keys, and example paths that leave the example's tree."""
    if not isinstance(data, dict):
        raise ValueError(f"PATCH: expected a table, got {shown(data)}")
    pid = _patch_id(data, path, _PATCH_KEYS)
    summary = one_str(data["summary"], "summary", empty=False)
    if "codemod" in data:
        one_str(data["codemod"], "codemod", empty=False)
    arches = str_list(data["arches"], "arches")
    for a in arches:
        if a not in ARCHES:
            raise ValueError(f"arches: unknown arch {shown(a)} (known: {', '.join(ARCHES)})")
    sites = []
    for i, s in enumerate(table_list(data["sites"], "sites")):
        where = f"sites[{i}]"
        own = getattr(codemod, "site_keys", {})  # key -> checker(value, where), the codemod's own
        no_unknown_keys(s, _SITE_KEYS | set(own), where)
        if "name" not in s or "functions" not in s:
            raise ValueError(f"{where}: needs 'name' and 'functions'")
        gates = one_str(s.get("gates", "all"), f"{where}.gates")
        if gates not in ("all", "one"):
            raise ValueError(f"{where}.gates: must be \"all\" or \"one\"")
        anywhere = one_bool(s.get("anywhere"), f"{where}.anywhere", False)
        modules = str_list(s["modules"], f"{where}.modules") if "modules" in s else ()
        if anywhere and not modules:
            raise ValueError(f"{where}.anywhere: needs 'modules' (the search order)")
        sites.append(Site(
            name=one_str(s["name"], f"{where}.name", empty=False),
            functions=str_list(s["functions"], f"{where}.functions"),
            modules=modules,
            markers=str_list(s["markers"], f"{where}.markers") if "markers" in s else (),
            required=one_bool(s.get("required"), f"{where}.required", True),
            applies_to=version_spec(s.get("applies_to"), f"{where}.applies_to"),
            applies_to_reason=one_str(s.get("applies_to_reason", ""), f"{where}.applies_to_reason"),
            lone=one_bool(s.get("lone"), f"{where}.lone", False),
            anywhere=anywhere,
            gates=gates,
            options=tuple((k, own[k](s[k], f"{where}.{k}")) for k in own if k in s),
            within=str_list(s["within"], f"{where}.within") if "within" in s else (),
        ))
        if hasattr(codemod, "check_site"):
            codemod.check_site(sites[-1], where, arches)
    if not sites:
        raise ValueError("sites: a patch needs at least one site")
    if len({s.name for s in sites}) != len(sites):
        raise ValueError("sites: two sites share a name")
    ignore = []
    for i, g in enumerate(table_list(data.get("ignore"), "ignore")):
        where = f"ignore[{i}]"
        no_unknown_keys(g, _IGNORE_KEYS, where)
        if not isinstance(g.get("function"), str) or not g["function"]:
            raise ValueError(f"{where}.function: needed (the function holding the gate)")
        reason = g.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{where}.reason: needed (why the gate may keep rejecting the arch)")
        ignore.append(Ignore(g["function"], reason.strip(), opt_str(g.get("module"), f"{where}.module"),
                             opt_str(g.get("gate"), f"{where}.gate")))
    examples = []
    for i, e in enumerate(table_list(data.get("examples"), "examples")):
        where = f"examples[{i}]"
        no_unknown_keys(e, _EXAMPLE_KEYS, where)
        if "before" not in e:
            raise ValueError(f"{where}: needs 'before'")
        arch = one_str(e.get("arch", arches[0]), f"{where}.arch")
        if arch not in ARCHES:
            raise ValueError(f"{where}.arch: unknown arch {shown(arch)}")
        context = e.get("context") or {}
        if not isinstance(context, dict):
            raise ValueError(f"{where}.context: expected a table of path = source, got {shown(context)}")
        for rel, code in context.items():
            example_path(rel, f"{where}.context")
            one_str(code, f"{where}.context")
        examples.append(Example(
            before=one_str(e["before"], f"{where}.before"),
            after=None if e.get("after") is None else one_str(e["after"], f"{where}.after"),
            arch=arch, path=example_path(e.get("path", "example.py"), f"{where}.path"),
            context=tuple(sorted(context.items())), upstream=one_bool(e.get("upstream"), f"{where}.upstream", False),
            name=one_str(e.get("name", f"example {i + 1}"), f"{where}.name"),
            fallback=one_bool(e.get("fallback"), f"{where}.fallback", False),
        ))
    return Patch(
        id=pid, summary=summary, arches=arches, sites=tuple(sites), codemod=codemod,
        applies_to=version_spec(data.get("applies_to"), "applies_to"),
        applies_to_reason=one_str(data.get("applies_to_reason", ""), "applies_to_reason"),
        ignore=tuple(ignore), examples=tuple(examples), path=path, package=package_of(data),
    )


def _patch_id(data: dict[str, Any], path: Path | None, keys: set[str]) -> str:
    """The head every patch table shares: its required keys, no key outside ``keys``, an id
    of the allowed spelling that names its file. Raises ValueError('key: msg')."""
    for key in ("id", "summary", "arches", "sites"):
        if key not in data:
            raise ValueError(f"{key}: missing")
    no_unknown_keys(data, keys, "")
    pid = data["id"]
    if not isinstance(pid, str) or len(pid) > 100 or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", pid):
        raise ValueError(f"id: {shown(pid)} must be lower-case letters, digits, '-', '.', '_'")
    if path is not None and path.stem != pid:
        raise ValueError(f"id: {pid!r} does not match the file name {path.name!r}")
    return pid


def build_file_patch(data: dict[str, Any], kind_name: str, path: Path | None, raw: bytes) -> Patch:
    """A ``Patch`` of a file kind from its TOML table. Raises ValueError('key: msg')."""
    kind = filepatch.kind_class(kind_name)
    pid = _patch_id(data, path, {"id", "summary", "arches", "sites", "applies_to", "applies_to_reason", "codemod",
                                 "package"})
    summary = one_str(data["summary"], "summary", empty=False)
    arches = str_list(data["arches"], "arches")
    for a in arches:
        if a not in ARCHES:
            raise ValueError(f"arches: unknown arch {shown(a)} (known: {', '.join(ARCHES)})")
    package = package_of(data)
    sites, specs, extra = [], {}, b""
    for i, table in enumerate(table_list(data["sites"], "sites")):
        where = f"sites[{i}]"
        no_unknown_keys(table, kind.KEYS | {"name", "required", "applies_to", "applies_to_reason"}, where)
        if "name" not in table:
            raise ValueError(f"{where}.name: missing")
        name = one_str(table["name"], f"{where}.name", empty=False)
        spec = kind.parse_site(table, where, path)
        extra += getattr(spec, "digest", b"")
        sites.append(Site(
            name=name, functions=tuple(getattr(spec, "functions", ())), modules=tuple(getattr(spec, "modules", ())),
            required=one_bool(table.get("required"), f"{where}.required", True),
            applies_to=version_spec(table.get("applies_to"), f"{where}.applies_to"),
            applies_to_reason=one_str(table.get("applies_to_reason", ""), f"{where}.applies_to_reason")))
        specs[name] = spec
    if not sites:
        raise ValueError("sites: a patch needs at least one site")
    if len(specs) != len(sites):
        raise ValueError("sites: two sites share a name")
    patch = Patch(id=pid, summary=summary, arches=arches, sites=tuple(sites), codemod=kind,
                  applies_to=version_spec(data.get("applies_to"), "applies_to"),
                  applies_to_reason=one_str(data.get("applies_to_reason", ""), "applies_to_reason"),
                  path=path, package=package, file_sites=specs)
    # the patch's identity covers what it carries (added files), not only its TOML
    patch.hash = hashlib.sha256(raw + extra).hexdigest()
    return patch


def _key_loc(exc: ValueError) -> tuple[str, ...]:
    key = getattr(exc, "key", None) or str(exc).split(":", 1)[0]
    return tuple(re.sub(r"\[\d+\]", "", key).split("."))


def _toml_patch(path: Path, raw: bytes) -> Patch:
    text = decode_utf8(path, raw)
    data = parse_toml(path, text)
    try:
        name = data.get("codemod", "arch-gate")

        if name in filepatch.KINDS:
            return build_file_patch(data, name, path, raw)
        codemod = declarative_codemod(one_str(name, "codemod"))
        return build_patch(data, codemod, path)
    except ValueError as exc:
        raise BadInput(located(path, key_line(text, _key_loc(exc)), str(exc))) from None


def _py_key_line(source: str, message: str) -> int | None:
    """The line of the ``PATCH`` entry a validation message names (``sites[0].required``),
    else of the ``PATCH`` assignment."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    node = None
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "PATCH" for t in targets):
            node = stmt
    if node is None:
        return None
    line, value = node.lineno, node.value
    key = message.split(":", 1)[0]
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", key):
        if part.startswith("[") and isinstance(value, (ast.List, ast.Tuple)):
            i = int(part[1:-1])
            if i >= len(value.elts):
                break
            value = value.elts[i]
        elif isinstance(value, ast.Dict):
            hit = next((v for k, v in zip(value.keys, value.values)
                        if isinstance(k, ast.Constant) and k.value == part), None)
            if hit is None:
                break
            value = hit
        else:
            break
        line = value.lineno
    return line


def _py_source(path: Path, raw: bytes) -> str:
    """The patch file's text in its declared encoding (PEP 263, default UTF-8);
    ``file:line: not UTF-8`` (or the declared one) before anything runs."""
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        raise BadInput(located(path, getattr(exc, "lineno", None) or 1, f"bad encoding declaration: {exc.msg if hasattr(exc, 'msg') else exc}")) from None
    if encoding in ("utf-8", "utf-8-sig"):
        return decode_utf8(path, raw.removeprefix(b"\xef\xbb\xbf"))
    try:
        return raw.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        start = getattr(exc, "start", 0)
        raise BadInput(located(path, raw.count(b"\n", 0, start) + 1, f"not valid {encoding}")) from None


def _py_patch(path: Path, raw: bytes) -> Patch:
    import ast

    source = _py_source(path, raw)
    module = guard.import_patch(path)
    data, codemod = getattr(module, "PATCH", None), getattr(module, "Codemod", None)
    if not isinstance(data, dict) or codemod is None:
        raise BadInput(located(path, None, "a .py patch must define PATCH (a dict) and Codemod (a SiteCodemod class)"))
    codemod_line = None
    try:
        codemod_line = next((n.lineno for n in ast.parse(source).body
                             if isinstance(n, (ast.ClassDef, ast.Assign)) and (
                                 getattr(n, "name", None) == "Codemod"
                                 or any(isinstance(t, ast.Name) and t.id == "Codemod" for t in getattr(n, "targets", [])))), None)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    guard.check_codemod(codemod, path, codemod_line)
    try:
        patch = build_patch(data, codemod, path)
    except ValueError as exc:
        raise BadInput(located(path, _py_key_line(source, str(exc)), str(exc))) from None
    except RecursionError:
        raise BadInput(located(path, _py_key_line(source, ""), "PATCH is nested too deeply")) from None
    patch.codemod_line = codemod_line
    return patch


def load_patch(path: Path) -> Patch:
    check_path(path, "patch", "file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read patch: {exc.strerror}") from None
    patch = _toml_patch(path, raw) if path.suffix == ".toml" else _py_patch(path, raw)
    patch.hash = patch.hash or hashlib.sha256(raw).hexdigest()  # a file kind's covers its files
    return patch


def patch_files(patches) -> dict[str, Path]:
    """id -> file of every patch of ``patches`` (a ``PatchLibrary``: shipped + user, user ones
    overriding by id; or a directory: exactly its patches)."""
    return as_library(patches).paths()


def load_patches(patches, ids: list[str]) -> list[Patch]:
    """Load the named patches, in series order (``patches``: a library or a directory)."""
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
