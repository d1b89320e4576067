"""Recognising SGLang arch predicates and the gates built from them (libcst nodes).

SGLang spells "this GPU is sm_100" three ways, by era:
``_is_sm100_supported`` (module constant), ``is_sm100_supported()`` (call) and
``get_platform().is_sm100`` (attribute). A *gate* is an ``or`` chain of such predicates
(pure), a chain mixing them with other conditions (mixed, never widened), or a lone one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

_FAMILY = re.compile(r"^_?is_(sm\d+)(?:_supported)?$")


@dataclass(frozen=True)
class Predicate:
    node: cst.BaseExpression
    family: str  # "sm100"
    idiom: str  # "constant" | "call" | "attribute"
    name: str  # the identifier that carries the family: "_is_sm100_supported", "is_sm100"


def predicate(node: cst.BaseExpression) -> Predicate | None:
    """The arch predicate ``node`` is, or None."""
    if isinstance(node, cst.Name):
        m = _FAMILY.match(node.value)
        if m and node.value.startswith("_is_") and node.value.endswith("_supported"):
            return Predicate(node, m.group(1), "constant", node.value)
        return None
    if isinstance(node, cst.Call):
        func = node.func
        name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
        # ``is_sm100_supported()``, and ``_is_sm120_supported()`` (a file's own helper function)
        if name and name.lstrip("_").startswith("is_") and name.endswith("_supported") and (m := _FAMILY.match(name)):
            return Predicate(node, m.group(1), "call", name)
        return None
    if isinstance(node, cst.Attribute):
        name = node.attr.value
        if name.startswith("is_") and not name.endswith("_supported") and (m := _FAMILY.match(name)):
            return Predicate(node, m.group(1), "attribute", name)
    return None


def or_operands(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """Flatten an ``or`` chain (parenthesised sub-chains included) into its operands."""
    if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or):
        return or_operands(node.left) + or_operands(node.right)
    return [node]


@dataclass
class Gate:
    """An arch gate: the expression to widen (an ``or`` chain or a lone predicate)."""

    node: cst.BaseExpression
    kind: str  # "pure" | "mixed" | "lone"
    predicates: list[Predicate]

    @property
    def families(self) -> set[str]:
        return {p.family for p in self.predicates}

    def accepts(self, family: str) -> bool:
        return family in self.families


class GateFinder(cst.CSTVisitor):
    """Collects the gates under a node: maximal ``or`` chains holding a predicate, and lone
    predicates (outside any ``or`` chain)."""

    def __init__(self) -> None:
        self.gates: list[Gate] = []
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self._stack: list[cst.CSTNode] = []
        self._in_chain = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._stack:
            self.parents[node] = self._stack[-1]
        self._stack.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        self._stack.pop()

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> bool:
        if isinstance(node.operator, cst.Or) and not self._in_chain:
            operands = or_operands(node)
            preds = [p for p in map(predicate, operands) if p]
            if preds:
                kind = "pure" if len(preds) == len(operands) else "mixed"
                self.gates.append(Gate(node, kind, preds))
            self._in_chain += 1
            for op in operands:  # look for gates nested inside non-predicate operands
                if not predicate(op):
                    self._in_chain -= 1
                    op.visit(self)
                    self._in_chain += 1
            self._in_chain -= 1
            return False
        return True

    def _lone(self, node: cst.BaseExpression) -> bool:
        p = predicate(node)
        if p and not self._in_chain:
            self.gates.append(Gate(node, "lone", [p]))
            return False
        return True

    def visit_Name(self, node: cst.Name) -> bool:
        return self._lone(node)

    def visit_Call(self, node: cst.Call) -> bool:
        return self._lone(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return self._lone(node)


def find_gates(node: cst.CSTNode, parents: dict | None = None) -> list[Gate]:
    """The gates under ``node``; fills ``parents`` (child -> parent) if given."""
    finder = GateFinder()
    if parents is not None:
        finder.parents = parents
    node.visit(finder)
    return finder.gates


class _Rename(cst.CSTTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        if re.search(rf"(?<![0-9a-z]){self.old}(?![0-9])", updated.value):
            return updated.with_changes(value=re.sub(rf"(?<![0-9a-z]){self.old}(?![0-9])", self.new, updated.value))
        return updated


def rename_family(node: cst.CSTNode, old: str, new: str) -> cst.CSTNode:
    """Copy of ``node`` with identifiers of family ``old`` respelled as ``new``
    (``_is_sm100_supported`` -> ``_is_sm120_supported``, ``.is_sm100`` -> ``.is_sm120``)."""
    return node.visit(_Rename(old, new))
