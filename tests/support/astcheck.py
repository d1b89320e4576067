"""Semantic checks on patched trees with Python's own ``ast`` (independent of libcst)."""

from __future__ import annotations

import ast
import re

_PRED = re.compile(r"^_?is_(sm\d+)(?:_supported)?$")


def family(node: ast.AST) -> str | None:
    """The arch family of a predicate node (three SGLang idioms), or None."""
    if isinstance(node, ast.Name) and node.id.startswith("_is_") and (m := _PRED.match(node.id)):
        return m.group(1)
    if isinstance(node, ast.Call):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name.endswith("_supported") and (m := _PRED.match(name)):
            return m.group(1)
    if isinstance(node, ast.Attribute) and not node.attr.endswith("_supported") and (m := _PRED.match(node.attr)):
        return m.group(1)
    return None


class _Strip(ast.NodeTransformer):
    """Remove every trace of ``fam`` a patch may add: predicate operands of ``or`` chains,
    and the module-level constant, import alias and helper function of that name."""

    def __init__(self, fam: str) -> None:
        self.fam = fam

    def visit_BoolOp(self, node: ast.BoolOp):
        self.generic_visit(node)
        if isinstance(node.op, ast.Or):
            values = [v for v in node.values if family(v) != self.fam]
            if len(values) == 1:
                return values[0]
            node.values = values
        return node

    def visit_Module(self, node: ast.Module):
        body = []
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == f"_is_{self.fam}_supported" for t in stmt.targets):
                continue
            if isinstance(stmt, ast.FunctionDef) and stmt.name == f"is_{self.fam}_supported":
                continue
            if isinstance(stmt, ast.ImportFrom):
                stmt.names = [a for a in stmt.names if a.name != f"is_{self.fam}_supported"]
                if not stmt.names:
                    continue
            body.append(self.visit(stmt))
        node.body = body
        return node


def strip_family(source: str, fam: str) -> str:
    return ast.dump(_Strip(fam).visit(ast.parse(source)))


def gates_accepting(source: str, fam: str) -> list[tuple[str, int]]:
    """(enclosing function, line) of every ``or`` chain holding a ``fam`` predicate."""
    out = []

    def walk(node, func):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.BoolOp) and isinstance(child.op, ast.Or):
                if any(family(v) == fam for v in child.values):
                    out.append((func, child.lineno))
            walk(child, name)

    walk(ast.parse(source), "<module>")
    return out


def module_binds(source: str, name: str) -> bool:
    tree = ast.parse(source)
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and stmt.name == name:
            return True
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return True
        if isinstance(stmt, ast.ImportFrom) and any((a.asname or a.name) == name for a in stmt.names):
            return True
    return False


def imports_of(source: str, name: str) -> list[str]:
    """Modules ``name`` is imported from at the top level."""
    return [s.module for s in ast.parse(source).body
            if isinstance(s, ast.ImportFrom) and any(a.name == name for a in s.names)]
