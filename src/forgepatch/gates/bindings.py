"""Local bindings of a function for the arch evaluator: parameters bound at a call, and the
names its body assigns (flow-insensitive), found by walking statements only."""

from __future__ import annotations

import ast
from typing import Any

from forgepatch.gates.values import UNKNOWN


def bind_call(arguments: ast.arguments, args: list, kwargs: dict, method: bool) -> dict[str, Any]:
    params = [a.arg for a in arguments.posonlyargs + arguments.args]
    if method and params:
        params = params[1:]
    bound: dict[str, Any] = {p: UNKNOWN for p in params}
    bound.update({a.arg: UNKNOWN for a in arguments.kwonlyargs})
    defaults = arguments.defaults
    for name, default in zip(params[len(params) - len(defaults):], defaults):
        bound[name] = default
    for name, default in zip([a.arg for a in arguments.kwonlyargs], arguments.kw_defaults):
        if default is not None:
            bound[name] = default
    for name, value in zip(params, args):
        bound[name] = value
    for name, value in kwargs.items():
        if name in bound:
            bound[name] = value
    return bound


def assignments(func: ast.AST) -> dict[str, Any]:
    """Flow-insensitive local bindings of a function body: ``name = expr`` and
    ``a, b = expr`` (as ("unpack", expr, i)); a name bound more than once is UNKNOWN (which
    binding reaches a use is not followed). Nested functions and classes are not entered."""
    out: dict[str, Any] = {}

    def bind(name: str, value: Any) -> None:
        out[name] = UNKNOWN if name in out else value

    for node in statements(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                bind(target.id, node.value)
            elif isinstance(target, (ast.Tuple, ast.List)):
                for i, elt in enumerate(target.elts):
                    if isinstance(elt, ast.Name):
                        bind(elt.id, ("unpack", node.value, i))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            bind(node.target.id, node.value)
        elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor)) and isinstance(getattr(node, "target", None), ast.Name):
            bind(node.target.id, UNKNOWN)
    return out


def statements(func: ast.AST):
    """Every statement in a function body, nested blocks included, nested functions and
    classes not entered (cheaper than ast.walk: expressions are not visited)."""
    stack = list(reversed(getattr(func, "body", None) or getattr(func, "nodes", [])))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield node
        children = []
        for field_name in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, field_name, ()) or ():
                if isinstance(child, (ast.excepthandler, ast.match_case)):
                    children.extend(child.body)
                elif isinstance(child, ast.stmt):
                    children.append(child)
        stack.extend(reversed(children))


class Locals(dict):
    """A function's bindings, computed the first time a name is looked up."""

    def __init__(self, func: ast.AST):
        super().__init__()
        self._func: ast.AST | None = func

    def _load(self) -> None:
        if self._func is not None:
            func, self._func = self._func, None
            self.update(assignments(func))

    def __contains__(self, name) -> bool:
        self._load()
        return super().__contains__(name)

    def __getitem__(self, name):
        self._load()
        return super().__getitem__(name)

    def items(self):
        self._load()
        return super().items()
