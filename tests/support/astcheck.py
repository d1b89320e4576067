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


def _module_file(module: str, read, rel: str, level: int) -> str | None:
    """Package-relative file of ``module`` (``sglang.srt.utils`` or a relative import)."""
    if level:
        base = rel.split("/")[:-1][: len(rel.split("/")) - level] if level > 1 else rel.split("/")[:-1]
        parts = base + (module.split(".") if module else [])
    else:
        parts = module.split(".")[1:] if module.split(".")[0] == "sglang" else None
        if parts is None:
            return None
    for cand in ("/".join(parts) + ".py", "/".join(parts + ["__init__.py"])):
        if read(cand) is not None:
            return cand
    return None


def _kind(source: str, name: str, read, rel: str, depth: int = 0) -> str | None:
    """"function" / "value" / None: what ``name`` is at the top level of ``source``,
    following ``from X import name`` (re-exports and ``import *`` included) in the tree."""
    for stmt in ast.parse(source).body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return "function"
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return "value"
        if isinstance(stmt, ast.ImportFrom) and depth < 5:
            for a in stmt.names:
                if (a.asname or a.name) == name or a.name == "*":
                    where = _module_file(stmt.module or "", read, rel, stmt.level)
                    text = read(where) if where else None
                    kind = _kind(text, a.name if a.name != "*" else name, read, where, depth + 1) if text else None
                    if kind or a.name != "*":
                        return kind
    return None


def names_resolve(source: str, read, rel: str, fam: str = "sm120") -> bool:
    """Every ``_is_<fam>_supported`` / ``is_<fam>_supported`` the file uses is bound in this
    tree and used as what it is (a function is called, a flag is not); every
    ``.is_<fam>`` attribute is one the platform module defines."""
    tree = ast.parse(source)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in (f"_is_{fam}_supported", f"is_{fam}_supported"):
            if not isinstance(node.ctx, ast.Load):
                continue
            kind = _kind(source, node.id, read, rel)
            if kind is None:
                return False
            if kind == "function" and id(node) not in called:
                return False  # a function object in an `or` chain is always true
            if kind == "value" and id(node) in called and node.id.startswith("_"):
                return False  # a flag called
        if isinstance(node, ast.Attribute) and node.attr == f"is_{fam}":
            platform = read("srt/runtime_context.py") or ""
            if f"is_{fam}" not in platform:
                return False
    return True


def strip_guard(source: str, guard: str) -> str:
    """The AST of ``source`` without the module-level ``guard`` function and its calls:
    what must be left of a file the sm103 patch changed (nothing else may differ)."""
    tree = ast.parse(source)
    tree.body = [s for s in tree.body if not (isinstance(s, ast.FunctionDef) and s.name == guard)]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                                                 and getattr(s.value.func, "id", "") == guard)]
    return ast.dump(tree)
