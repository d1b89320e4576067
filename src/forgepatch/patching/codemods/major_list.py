"""``codemod = "major-list"``: widen an arch list such as ``supported_major_versions=[10]``
so it admits the arch's major (FlashInfer's JIT module builders gate their kernels this way).

A site names the function(s) holding the list, the modules it lives in and the keyword
(default ``supported_major_versions``). Every such keyword list in the function must be a
literal list (or tuple) of ints: one that is not (a name, a call) cannot be verified and is
drift, not a guess. The major is inserted in order, keeping the list's own spelling; the
result is re-read and must list the major at every place (and compile). A list that
already lists it is already-applied (or absorbed-upstream on a pristine tree); a function
without the list, or no such function, is drift with the package's lists of that keyword
closest to the name as candidates.
"""

from __future__ import annotations

import ast
import difflib
import fnmatch
from dataclasses import dataclass
from typing import Any

from forgepatch.patching.filesite import site_result
from forgepatch.patching.model import Location, SiteResult, Status
from forgepatch.patching.patchkeys import one_str, shown, str_list

KEYWORD = "supported_major_versions"


@dataclass(frozen=True)
class ListSite:
    functions: tuple[str, ...]
    modules: tuple[str, ...]
    keyword: str = KEYWORD


@dataclass
class Found:
    line: int
    symbol: str
    majors: list[int] | None  # None: not a literal list of ints
    code: str
    node: Any = None


class MajorList:
    file_patch = True
    KIND = "major-list"
    covers_gates = False
    KEYS = {"functions", "modules", "keyword"}

    @staticmethod
    def parse_site(table: dict[str, Any], where: str, path) -> ListSite:
        if "functions" not in table or "modules" not in table:
            raise ValueError(f"{where}: needs 'functions' (the JIT module builder holding the list) and 'modules'")
        keyword = one_str(table.get("keyword", KEYWORD), f"{where}.keyword", empty=False)
        if not keyword.isidentifier():
            raise ValueError(f"{where}.keyword: {shown(keyword)} is not a keyword argument name")
        modules = str_list(table["modules"], f"{where}.modules")
        for m in modules:
            if not m.endswith(".py"):
                raise ValueError(f"{where}.modules: {shown(m)} is not a .py file (major-list edits Python)")
        return ListSite(str_list(table["functions"], f"{where}.functions"), modules, keyword)

    @staticmethod
    def run_site(run, name: str, spec: ListSite) -> SiteResult:
        files = [p for p in run.paths() if p.endswith(".py") and any(fnmatch.fnmatch(p, m) for m in spec.modules)]
        locations: list[Location] = []
        found_fn = []
        for rel in files:
            text = run.read(rel)
            if text is None or not any(f in text for f in spec.functions):
                continue
            lists, fns = find_lists(text, spec)
            found_fn += [f"{q} ({rel}:{ln})" for q, ln in fns]
            if not lists:
                continue
            edits = []
            for f in lists:
                if f.majors is None:
                    locations.append(Location(Status.DRIFT, rel, f.line, f.symbol,
                                              f"`{spec.keyword}={f.code}` is not a literal list of majors: cannot verify it"))
                elif run.major in f.majors:
                    locations.append(Location(run.settled(rel), rel, f.line, f.symbol,
                                              f"`{spec.keyword}={f.code}` lists {run.major}"))
                else:
                    edits.append(f)
            if not edits or any(loc.status is Status.DRIFT for loc in locations):
                continue
            new_text = widen(text, edits, run.major)
            problem = check(new_text, spec, run.major, rel)
            for f in edits:
                locations.append(Location(Status.INCOMPLETE if problem else Status.APPLIED, rel, f.line, f.symbol,
                                          problem or f"`{spec.keyword}={f.code}` -> {sorted(f.majors + [run.major])}"))
            if not problem:
                run.write(rel, new_text)
        if locations:
            return site_result(name, locations)
        where = ", ".join(spec.modules)
        detail = (f"{', '.join(found_fn)} holds no `{spec.keyword}=[...]`" if found_fn
                  else f"no function {' / '.join(spec.functions)} in {where}")
        return SiteResult(name, Status.DRIFT, detail=detail, candidates=candidates(run, spec))


def find_lists(text: str, spec: ListSite) -> tuple[list[Found], list[tuple[str, int]]]:
    """The ``keyword=`` lists inside the site's functions, and the functions found."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [], []
    lines = text.splitlines(keepends=True)
    out, fns = [], []

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef) and child.name in spec.functions:
                    fns.append((qual, child.lineno))
                    for n in ast.walk(child):
                        if isinstance(n, ast.keyword) and n.arg == spec.keyword:
                            out.append(Found(n.value.lineno, qual, _majors(n.value), _segment(lines, n.value), n.value))
                visit(child, qual + ".")

    visit(tree, "")
    return out, fns


def _majors(value: ast.AST) -> list[int] | None:
    if not isinstance(value, (ast.List, ast.Tuple)):
        return None
    if not all(isinstance(e, ast.Constant) and type(e.value) is int for e in value.elts):
        return None
    return [e.value for e in value.elts]


def _offset(lines: list[str], line: int, col_bytes: int) -> int:
    """Character offset in the text of ``line`` (1-based) at UTF-8 byte column ``col_bytes``."""
    before = sum(len(ln) for ln in lines[: line - 1])
    return before + len(lines[line - 1].encode("utf-8")[:col_bytes].decode("utf-8", "replace"))


def _segment(lines: list[str], node: ast.AST) -> str:
    text = "".join(lines)
    start = _offset(lines, node.lineno, node.col_offset)
    end = _offset(lines, node.end_lineno, node.end_col_offset)
    return " ".join(text[start:end].split())


def widen(text: str, found: list[Found], major: int) -> str:
    """``text`` with ``major`` inserted in order into each list (its spelling kept)."""
    lines = text.splitlines(keepends=True)
    inserts = []
    for f in found:
        elts = f.node.elts
        later = next((e for e in elts if e.value > major), None)
        if later is not None:
            inserts.append((_offset(lines, later.lineno, later.col_offset), f"{major}, "))
        elif elts:
            last = elts[-1]
            inserts.append((_offset(lines, last.end_lineno, last.end_col_offset), f", {major}"))
        else:  # [] or (): after the opening bracket; a tuple of one needs its comma
            at = _offset(lines, f.node.lineno, f.node.col_offset) + 1
            inserts.append((at, f"{major}," if isinstance(f.node, ast.Tuple) else f"{major}"))
    for at, piece in sorted(inserts, reverse=True):
        text = text[:at] + piece + text[at:]
    return text


def check(new_text: str, spec: ListSite, major: int, rel: str) -> str | None:
    """The self-check of an edit: the file compiles and every list of the site lists the major."""
    try:
        compile(new_text, rel, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return f"self-check: the widened file does not compile: {exc}"
    lists, _ = find_lists(new_text, spec)
    left = [f for f in lists if f.majors is None or major not in f.majors]
    if left:
        return f"self-check: `{spec.keyword}={left[0].code}` still does not list {major} after the edit"
    return None


def candidates(run, spec: ListSite, n: int = 5) -> list[str]:
    """The package's ``keyword=`` lists in functions closest in name to the site's."""
    pool: list[tuple[str, str]] = []
    for rel in run.paths():
        if not rel.endswith(".py"):
            continue
        text = run.read(rel)
        if text is None or spec.keyword not in text:
            continue
        for f in _all_lists(text, spec.keyword):
            pool.append((f.symbol.rsplit(".", 1)[-1], f"{f.symbol} ({rel}:{f.line}) {spec.keyword}={f.code}"))
    names = [p[0] for p in pool]
    ranked = []
    for want in spec.functions:
        ranked += difflib.get_close_matches(want, names, n=n, cutoff=0.5)
    seen, out = set(), []
    for name in ranked:
        for fn, label in pool:
            if fn == name and label not in seen:
                seen.add(label)
                out.append(label)
    return out[:n]


def _all_lists(text: str, keyword: str) -> list[Found]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    lines = text.splitlines(keepends=True)
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(fn):
                if isinstance(n, ast.keyword) and n.arg == keyword:
                    out.append(Found(n.value.lineno, fn.name, _majors(n.value), _segment(lines, n.value)))
    return out
