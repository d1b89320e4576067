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

from forgepatch.patching.astview import SIBLING_NEEDLES, SIBLINGS, names, names_marker, view
from forgepatch.patching.markers import Matcher

_FAMILY = re.compile(r"^_?is_(sm\d+)(?:_supported)?$")
_SIBLING_BYTES = re.compile(rb"is_sm(?:%s)" % b"|".join(f[2:].encode() for f in SIBLINGS))
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


def _pure_gates(func: ast.AST):
    """(gate node, parents) for every pure ``or`` chain of arch predicates under ``func``;
    read once per node (kept on it: the nodes of a text's view are shared by every patch
    of a series that lints that text, and the answer depends on the node alone)."""
    held = getattr(func, "_forgepatch_pure_gates", None)
    if held is None:
        held = _read_pure_gates(func)
        func._forgepatch_pure_gates = held  # type: ignore[attr-defined]
    return held


def _read_pure_gates(func: ast.AST):
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


def lint_file(text: str, rel: str, markers: Iterable[str], target: str, arch_name: str) -> list[LintFinding]:
    """The pure gates of ``text`` that still reject family ``target`` (see the module doc).
    Raises SyntaxError for a file Python cannot parse."""
    needles = tuple(sorted(set(markers)))
    match = Matcher(needles)
    lines = text.splitlines(keepends=True)
    file = view(text)
    segments: dict[int, str] = {}

    def segment(node) -> str:
        if id(node) not in segments:
            segments[id(node)] = "".join(lines[node.lineno - 1: node.end_lineno])
        return segments[id(node)]

    def has_sibling(node) -> bool:
        return any(n in segment(node) for n in SIBLING_NEEDLES)

    # what could make a function matter: a sibling predicate in it, a call of a function
    # that may hold one, or a module-level name holding a rejecting gate (supersets, by text)
    maybe = file.gated_names()
    constants = [stmt for stmt in file.constants() if stmt.value is not None and has_sibling(stmt)]
    held = [(stmt, gate, fams) for stmt in constants for gate, fams in _pure_gates(stmt.value)[0]
            if target not in fams and fams & set(SIBLINGS)]
    held_names = {t.id for stmt, _g, _f in held for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
                  if isinstance(t, ast.Name)}
    reach = (*SIBLING_NEEDLES, *maybe, *held_names)

    # 1. the feature's functions: their code names a marker
    funcs = file.functions(needles, relevant=lambda region: any(n in region for n in reach))
    feature = {id(node) for node, _q in funcs
               if any(m in segment(node) for m in needles) and names_marker([node], match)}
    if not feature:
        return []
    # 2. the same-module functions they call, where those hold a sibling predicate
    called: set[str] = set()
    for node, _q in funcs:
        if id(node) in feature and any(n in segment(node) for n in maybe):
            called |= _calls(node) & maybe
    if called:
        funcs = funcs + [f for f in file.functions(SIBLING_NEEDLES, called) if f not in funcs]
    gated = {id(node) for node, _q in funcs if has_sibling(node)}  # where a gate can be
    routed = {node.name for node, _q in funcs if id(node) in gated} & called
    out: dict[tuple[int, int], LintFinding] = {}
    # 3. a gate kept in a module-level name (``_fusion_ok = _is_sm90_supported or ...``) that
    # a feature function reads is on its path too
    used = names([node for node, _q in funcs if id(node) in feature]) if held else set()
    for stmt, gate, fams in held:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        read = [t.id for t in targets if isinstance(t, ast.Name) and t.id in used]
        if read:
            out[(gate.lineno, gate.col_offset)] = LintFinding(
                rel, gate.lineno, read[0], ast.unparse(gate), f"rejects {arch_name}: gate is read by a feature function")
    for node, qual in reversed(funcs):  # innermost first: a nested function's gate is its own
        named, on_path = id(node) in feature, node.name in routed
        if not (named or on_path) or id(node) not in gated or not _OR.search(segment(node)):
            continue
        chains, parents = _pure_gates(node)
        for gate, fams in chains:
            if target in fams or not fams & set(SIBLINGS):
                continue
            # a gate's own unit names a marker by reading it (a call's keyword name is the
            # callee's parameter: the per-arch evaluation judges site functions' gates)
            in_unit = named and names_marker(_unit(gate, parents), match, keywords=False)
            if not in_unit and not on_path:
                continue
            key = (gate.lineno, gate.col_offset)
            if key in out:
                continue
            why = "names the feature's markers" if in_unit else "is on the path of a feature function"
            # ast.unparse: the gate in one canonical spelling (what `ignore.gate` matches)
            out[key] = LintFinding(rel, gate.lineno, qual, ast.unparse(gate), f"rejects {arch_name}: gate {why}")
    return [out[k] for k in sorted(out)]
