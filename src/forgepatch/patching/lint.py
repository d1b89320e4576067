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
import re
from dataclasses import asdict, dataclass
from typing import Iterable

from forgepatch.patching.markers import names_any

SIBLINGS = ("sm100", "sm90")  # the families a new arch is added next to (codemods.arch_gate)
_FAMILY = re.compile(r"^_?is_(sm\d+)(?:_supported)?$")
_SIBLING_BYTES = re.compile(rb"is_sm(?:%s)" % b"|".join(f[2:].encode() for f in SIBLINGS))


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


def candidate(data: bytes, markers: Iterable[str]) -> bool:
    """Can this file hold a feature gate? (bytes only: a sibling predicate and a marker)"""
    return _SIBLING_BYTES.search(data) is not None and any(m.encode() in data for m in markers)


def _or_operands(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        return [leaf for v in node.values for leaf in _or_operands(v)]
    return [node]


def _tokens(nodes: Iterable[ast.AST]) -> tuple[set[str], list[str]]:
    """(identifiers, non-doc string values) under ``nodes``: what ``markers`` calls code."""
    names: set[str] = set()
    strings: list[str] = []
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Expr) and isinstance(node.value, (ast.Constant, ast.JoinedStr)) and (
                isinstance(node.value, ast.JoinedStr) or isinstance(node.value.value, str)):
            continue  # a string statement is documentation
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append(node.value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.update((node.asname or node.name).split("."))
            names.update(node.name.split("."))
        stack.extend(ast.iter_child_nodes(node))
    return names, strings


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


def _functions(tree: ast.Module):
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

    walk(tree.body, [])
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


def def_tokens(text: str, wanted: set[str]) -> dict[int, tuple[set[str], list[str]]] | None:
    """Code tokens (see ``markers``) of each function named in ``wanted``, by the line of
    its ``def``; None when this Python cannot parse the file."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    return {node.lineno: _tokens([node]) for node, _q in _functions(tree) if node.name in wanted}


def lint_file(text: str, rel: str, markers: Iterable[str], target: str, arch_name: str) -> list[LintFinding]:
    """The pure gates of ``text`` that still reject family ``target`` (see the module doc).
    Raises SyntaxError for a file Python cannot parse."""
    markers = list(markers)
    lines = text.splitlines(keepends=True)
    needles = [m for m in markers]
    tree = ast.parse(text)
    funcs = _functions(tree)

    def segment(node) -> str:
        return "".join(lines[node.lineno - 1: node.end_lineno])

    def has_sibling(node) -> bool:
        return _SIBLING_BYTES.search(segment(node).encode()) is not None

    names_marker: dict[int, bool] = {}
    for node, _q in funcs:
        seg = segment(node)
        names_marker[id(node)] = any(n in seg for n in needles) and names_any(*_tokens([node]), markers)
    routed: set[str] = set()
    defined = {node.name for node, _ in funcs}
    for node, _q in funcs:
        if names_marker[id(node)]:
            routed |= _calls(node) & defined
    out: dict[tuple[int, int], LintFinding] = {}
    for node, qual in funcs:
        on_path = node.name in routed
        if not (names_marker[id(node)] or on_path) or not has_sibling(node):
            continue
        chains, parents = _pure_gates(node)
        for gate, fams in chains:
            if target in fams or not fams & set(SIBLINGS):
                continue
            in_unit = names_marker[id(node)] and names_any(*_tokens(_unit(gate, parents)), markers)
            if not in_unit and not on_path:
                continue
            key = (gate.lineno, gate.col_offset)
            if key in out:
                continue
            why = "names the feature's markers" if in_unit else "is on the path of a feature function"
            code = " ".join((ast.get_source_segment(text, gate) or ast.unparse(gate)).split())
            out[key] = LintFinding(rel, gate.lineno, qual, code, f"rejects {arch_name}: gate {why}")
    return [out[k] for k in sorted(out)]
