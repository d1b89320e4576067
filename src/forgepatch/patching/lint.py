"""Gate coverage: arch gates of a patch's feature that still reject the arch.

"Auto-enable fires, then start-up dies" happens when one gate of a feature accepts the new
arch and another, on the path it routes into, does not. This finds every *pure* arch gate
(an ``or`` of sm90/sm100 predicates, none of the target's family) that

(a) sits in a statement naming one of the feature's markers (an ``if`` test with its body,
    or the statement the gate is part of), inside a function naming a marker, or
(b) sits anywhere in a same-module function that such a function calls.

Markers are code tokens (see ``markers``). The check reads files with the standard
library's ``ast``: it is independent of the libcst code that edits them, and cheap enough
to run on every ``apply`` (the self-check) and on every revision of a ``drift`` scan.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Iterable

from forgepatch.patching.markers import Matcher

SIBLINGS = ("sm100", "sm90")  # the families a new arch is added next to (codemods.arch_gate)
_FAMILY = re.compile(r"^_?is_(sm\d+)(?:_supported)?$")
_SIBLING_BYTES = re.compile(rb"is_sm(?:%s)" % b"|".join(f[2:].encode() for f in SIBLINGS))
_SIBLING_TEXT = re.compile(_SIBLING_BYTES.pattern.decode())
_OR = re.compile(r"\bor\b")


@dataclass(frozen=True)
class LintFinding:
    file: str
    line: int | None
    function: str
    gate: str
    reason: str

    def to_json(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.function}: `{self.gate}` {self.reason}"


def family(node: ast.AST) -> str | None:
    """The arch family a predicate node tests (three SGLang idioms, and a call of a local
    ``_is_smXX_supported()`` helper), or None."""
    if isinstance(node, ast.Name):
        if node.id.startswith("_is_") and node.id.endswith("_supported") and (m := _FAMILY.match(node.id)):
            return m.group(1)
    elif isinstance(node, ast.Call):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name.endswith("_supported") and (m := _FAMILY.match(name)):
            return m.group(1)
    elif isinstance(node, ast.Attribute):
        if node.attr.startswith("is_") and not node.attr.endswith("_supported") and (m := _FAMILY.match(node.attr)):
            return m.group(1)
    return None


def candidate(data: bytes, markers: Iterable[str | bytes]) -> bool:
    """Can this file hold a feature gate? (bytes only: a sibling predicate and a marker)"""
    return (b"is_sm" in data and any((m if isinstance(m, bytes) else m.encode()) in data for m in markers)
            and _SIBLING_BYTES.search(data) is not None)


def _or_operands(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        return [leaf for v in node.values for leaf in _or_operands(v)]
    return [node]


def _code_tokens(nodes: Iterable[ast.AST]):
    """("name", identifier) and ("string", value) for the code under ``nodes``, skipping
    documentation (a string that stands alone as a statement): what ``markers`` calls code."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Expr) and (isinstance(node.value, ast.JoinedStr) or (
                isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))):
            continue
        if isinstance(node, ast.Name):
            yield "name", node.id
        elif isinstance(node, ast.Attribute):
            yield "name", node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield "string", node.value
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield "name", node.name
        elif isinstance(node, ast.arg):
            yield "name", node.arg
        elif isinstance(node, ast.keyword) and node.arg:
            yield "name", node.arg
        elif isinstance(node, ast.alias):
            for part in {*(node.asname or node.name).split("."), *node.name.split(".")}:
                yield "name", part
        stack.extend(ast.iter_child_nodes(node))


def names_marker(nodes: Iterable[ast.AST], match: Matcher) -> bool:
    """Does the code under ``nodes`` name a marker? (stops at the first one)"""
    for kind, value in _code_tokens(nodes):
        if match.name(value) if kind == "name" else match.string(value):
            return True
    return False


def _names(nodes: Iterable[ast.AST]) -> set[str]:
    return {value for kind, value in _code_tokens(nodes) if kind == "name"}


def _pure_gates(func: ast.AST):
    """(gate node, parents) for every pure ``or`` chain of arch predicates under ``func``."""
    parents: dict[ast.AST, ast.AST] = {}
    chains = []
    for node in ast.walk(func):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(func):
        if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)):
            continue
        up = parents.get(node)
        if isinstance(up, ast.BoolOp) and isinstance(up.op, ast.Or):
            continue  # part of a larger chain
        ops = _or_operands(node)
        fams = [family(op) for op in ops]
        if all(fams):
            chains.append((node, set(fams)))
    return chains, parents


_SIMPLE = (ast.Return, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Assert, ast.Raise,
           ast.Delete, ast.Pass, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Break, ast.Continue)


def _unit(node: ast.AST, parents: dict) -> list[ast.AST]:
    """What a gate guards: an ``if``/``while`` test plus the simple statements of its body,
    or the simple statement the gate sits in."""
    child, cur = node, parents.get(node)
    while cur is not None:
        if isinstance(cur, (ast.If, ast.While)) and child is cur.test:
            return [cur.test] + [s for s in cur.body if isinstance(s, _SIMPLE)]
        if isinstance(cur, _SIMPLE):
            return [cur]
        if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            break
        child, cur = cur, parents.get(cur)
    return [node]


def _functions(tree: ast.Module, prefix: list[str] | None = None):
    """(node, qualified name) of every function, methods and nested functions included."""
    out = []

    def walk(body, names):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((node, ".".join(names + [node.name])))
                walk(node.body, names + [node.name])
            elif isinstance(node, ast.ClassDef):
                walk(node.body, names + [node.name])
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    part = getattr(node, field, None)
                    if isinstance(part, list):
                        walk(part, names)
                if isinstance(node, ast.ExceptHandler):
                    pass
                for case in getattr(node, "cases", []) or []:
                    walk(case.body, names)

    walk(tree.body, list(prefix or []))
    return out


def _calls(func: ast.AST) -> set[str]:
    """Names called as ``f(...)``, ``self.f(...)`` or ``cls.f(...)`` inside ``func``."""
    out = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                out.add(f.id)
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("self", "cls"):
                out.add(f.attr)
    return out


_SIBLING_NEEDLES = tuple(f"is_{f}" for f in SIBLINGS)
_TOP_ASSIGN = re.compile(r"^[A-Za-z_]\w*[ \t]*(?::[^=\n]*)?=(?!=)", re.M)
_TOP_START = re.compile(r"^(?![ \t#\n\r)\]}]|else\b|elif\b|except\b|finally\b|case\b)", re.M)


class _View:
    """A file as far as the gate check reads it: functions parsed one by one, on demand (a
    7,000-line server_args.py costs 80 ms to parse whole, the few functions that matter a
    few ms); the whole file once a function cannot be cut out cleanly."""

    def __init__(self, text: str) -> None:
        from forgepatch.patching.functions import defs_of

        self.text = text
        self.defs = defs_of(text)
        self.parsed: dict[int, list] = {}  # header index -> [(function, qualified name)]
        self.ranges: list[tuple[int, int]] = []  # 0-based [first, end) lines of parsed blocks
        self.whole: list | None = None
        self._constants: list | None = None

    def functions(self, needles, names: set[str] | None = None) -> list:
        """Functions (nested ones included) whose code holds one of ``needles`` (and, with
        ``names``, is named in it), with the functions inside them."""
        if self.whole is None:
            try:
                out = []
                candidates = self.defs.around(needles)
                for i, line, name in self.defs.functions():
                    if i in self.parsed:
                        out += self.parsed[i]
                        continue
                    if i not in candidates or (names is not None and name not in names):
                        continue
                    if any(a <= line - 1 < b for a, b in self.ranges):
                        continue  # inside a block parsed already: its functions are listed
                    region = self.defs.region(i)
                    if not any(n in region[0] for n in needles):
                        continue
                    block, end = self.defs.block(i, region)
                    module = ast.parse("\n" * (line - 1) + block)  # lines as in the file
                    self.parsed[i] = _functions(module, self.defs.owners(i))
                    self.ranges.append((line - 1, end))
                    out += self.parsed[i]
                return out
            except (ValueError, SyntaxError):
                tree = ast.parse(self.text)  # SyntaxError here: Python cannot parse the file
                self.whole = _functions(tree)
                self._constants = [s for s in tree.body if isinstance(s, (ast.Assign, ast.AnnAssign))]
        return self.whole

    def gated_names(self) -> set[str]:
        """Names of the functions that may hold a sibling predicate (a superset: each
        occurrence counts for the function header before it and the ones around that)."""
        headers = self.defs.headers
        offsets = [h[4] for h in headers]
        out: set[str] = set()
        for m in _SIBLING_TEXT.finditer(self.text):
            i = bisect.bisect_right(offsets, m.start()) - 1
            if i < 0:
                continue
            out.update(headers[k][3] for k in [*self.defs.enclosing(i), i] if headers[k][2])
        return out

    def constants(self) -> list:
        """Module-level assignments that hold a sibling predicate."""
        if self._constants is None:
            text, out, seen = self.text, [], set()
            headers = self.defs.headers
            tops = [i for i, h in enumerate(headers) if h[1] == 0]  # top-level def / class
            offsets = [headers[i][4] for i in tops]
            ends: dict[int, int] = {}
            try:
                for m in _SIBLING_TEXT.finditer(text):
                    k = bisect.bisect_right(offsets, m.start()) - 1
                    if k >= 0:
                        if k not in ends:
                            raw, _line = self.defs.region(tops[k])
                            ends[k] = offsets[k] + len(raw)
                        if m.start() < ends[k]:
                            continue  # inside a top-level function or class
                    start = _statement_start(text, m.start())
                    if start in seen or not _TOP_ASSIGN.match(text, start):
                        continue
                    seen.add(start)
                    piece = text[start:_statement_end(text, start)]
                    module = ast.parse("\n" * text.count("\n", 0, start) + piece)  # lines as in the file
                    out += [s for s in module.body if isinstance(s, (ast.Assign, ast.AnnAssign))]
            except SyntaxError:
                tree = ast.parse(text)
                out = [s for s in tree.body if isinstance(s, (ast.Assign, ast.AnnAssign))]
            self._constants = out
        return self._constants


def _top_statement(text: str, at: int) -> bool:
    """Does a top-level statement begin at line offset ``at``?"""
    return at < len(text) and _TOP_START.match(text, at) is not None and text[at] not in "\n\r"


def _statement_start(text: str, pos: int) -> int:
    """Offset of the top-level statement line at or before ``pos``."""
    at = text.rfind("\n", 0, pos) + 1
    while at > 0 and not _top_statement(text, at):
        at = text.rfind("\n", 0, at - 1) + 1
    return at


def _statement_end(text: str, start: int) -> int:
    """Offset of the next top-level statement line after the one at ``start``."""
    at = text.find("\n", start)
    while at != -1:
        if _top_statement(text, at + 1):
            return at + 1
        at = text.find("\n", at + 1)
    return len(text)


@lru_cache(maxsize=8)
def _view(text: str) -> _View:
    return _View(text)


def site_functions_naming(text: str, wanted: set[str], markers: Iterable[str]) -> set[int] | None:
    """Lines of the ``def`` of each function named in ``wanted`` whose code names one of
    ``markers``; None when this Python cannot parse the file (the caller asks libcst)."""
    markers = list(markers)
    try:
        funcs = _view(text).functions(markers, set(wanted))
    except SyntaxError:
        return None
    match = Matcher(markers)
    return {node.lineno for node, _q in funcs if node.name in wanted and names_marker([node], match)}


def lint_file(text: str, rel: str, markers: Iterable[str], target: str, arch_name: str) -> list[LintFinding]:
    """The pure gates of ``text`` that still reject family ``target`` (see the module doc).
    Raises SyntaxError for a file Python cannot parse."""
    needles = tuple(sorted(set(markers)))
    match = Matcher(needles)
    lines = text.splitlines(keepends=True)
    view = _view(text)
    segments: dict[int, str] = {}

    def segment(node) -> str:
        if id(node) not in segments:
            segments[id(node)] = "".join(lines[node.lineno - 1: node.end_lineno])
        return segments[id(node)]

    def has_sibling(node) -> bool:
        return any(n in segment(node) for n in _SIBLING_NEEDLES)

    # 1. the feature's functions: their code names a marker
    funcs = view.functions(needles)
    feature = {id(node) for node, _q in funcs
               if any(m in segment(node) for m in needles) and names_marker([node], match)}
    if not feature:
        return []
    # 2. the same-module functions they call, where those hold a sibling predicate
    maybe = view.gated_names()
    called: set[str] = set()
    for node, _q in funcs:
        if id(node) in feature and any(n in segment(node) for n in maybe):
            called |= _calls(node) & maybe
    if called:
        funcs = funcs + [f for f in view.functions(_SIBLING_NEEDLES, called) if f not in funcs]
    gated = {id(node) for node, _q in funcs if has_sibling(node)}  # where a gate can be
    routed = {node.name for node, _q in funcs if id(node) in gated} & called
    constants = [stmt for stmt in view.constants() if stmt.value is not None and has_sibling(stmt)]
    out: dict[tuple[int, int], LintFinding] = {}
    # a gate kept in a module-level name (``_fusion_ok = _is_sm90_supported or ...``) that a
    # feature function reads is on its path too
    held = [(stmt, gate, fams) for stmt in constants for gate, fams in _pure_gates(stmt.value)[0]
            if target not in fams and fams & set(SIBLINGS)]
    used = _names([node for node, _q in funcs if id(node) in feature]) if held else set()
    for stmt, gate, fams in held:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names = [t.id for t in targets if isinstance(t, ast.Name) and t.id in used]
        if names:
            out[(gate.lineno, gate.col_offset)] = LintFinding(
                rel, gate.lineno, names[0], ast.unparse(gate), f"rejects {arch_name}: gate is read by a feature function")
    for node, qual in reversed(funcs):  # innermost first: a nested function's gate is its own
        named, on_path = id(node) in feature, node.name in routed
        if not (named or on_path) or id(node) not in gated or not _OR.search(segment(node)):
            continue
        chains, parents = _pure_gates(node)
        for gate, fams in chains:
            if target in fams or not fams & set(SIBLINGS):
                continue
            in_unit = named and names_marker(_unit(gate, parents), match)
            if not in_unit and not on_path:
                continue
            key = (gate.lineno, gate.col_offset)
            if key in out:
                continue
            why = "names the feature's markers" if in_unit else "is on the path of a feature function"
            # ast.unparse: the gate in one canonical spelling (what `ignore.gate` matches)
            out[key] = LintFinding(rel, gate.lineno, qual, ast.unparse(gate), f"rejects {arch_name}: gate {why}")
    return [out[k] for k in sorted(out)]
