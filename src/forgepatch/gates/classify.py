"""What a gate does with the arches it lets through: the maintainer's first question.

- ``rejects``: the arch is refused (the gate guards a ``raise``, or is an ``assert``);
- ``selects``: the gate picks a backend, default or other value (a string, an enum member
  ``Backend.X``, a conditional expression, a name or attribute naming a backend/mode);
- ``enables``: the gate turns a feature on or returns whether it applies (a flag, a call, a
  boolean ``return``, a ``supported_major_versions=[...]`` argument);
- ``mixed``: its code does more than one of these.

Read from the statement alone (``ast``); logging calls say nothing and are skipped.
"""

from __future__ import annotations

import ast

ENABLES, SELECTS, REJECTS, MIXED = "enables", "selects", "rejects", "mixed"
ROLES = (REJECTS, SELECTS, ENABLES, MIXED)
_LOGGING = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log", "print", "print_warning_once",
            "warning_once", "info_once"}
_CHOICE_WORDS = ("backend", "mode", "method", "impl", "kernel", "runner", "dtype", "algo", "default")


def _is_choice(value: ast.expr | None) -> bool:
    if value is None:
        return False
    if isinstance(value, ast.Constant):
        return isinstance(value.value, str) or (isinstance(value.value, (int, float)) and not isinstance(value.value, bool))
    if isinstance(value, ast.IfExp):
        return _is_choice(value.body) or _is_choice(value.orelse)
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id[:1].isupper():
        return True  # Enum.MEMBER
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name[:1].isupper()  # Backend("x")
    if isinstance(value, (ast.Tuple, ast.List)):
        return any(_is_choice(v) for v in value.elts)
    return False


def _target_is_choice(targets: list[ast.expr]) -> bool:
    for t in targets:
        name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else ""
        if any(w in name.lower() for w in _CHOICE_WORDS):
            return True
    return False


def _logging(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in _LOGGING


def _walk(stmts):
    """The statements of a block and of the blocks nested in it (not nested defs)."""
    for s in stmts:
        yield s
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _walk(getattr(s, field, []) or [])
        for h in getattr(s, "handlers", []) or []:
            yield from _walk(h.body)


def block_roles(stmts) -> set[str]:
    roles: set[str] = set()
    for s in _walk(stmts):
        if isinstance(s, ast.Raise):
            roles.add(REJECTS)
        elif isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            roles.add(SELECTS if _is_choice(s.value) or _target_is_choice(targets) else ENABLES)
        elif isinstance(s, ast.Return):
            roles.add(SELECTS if _is_choice(s.value) else ENABLES)
        elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and not _logging(s.value):
            roles.add(ENABLES)
    return roles


def role(stmt: ast.stmt, kind: str) -> str:
    """The role of a gate of ``kind`` (walk's kinds) in statement ``stmt``."""
    if kind == "assert":
        return REJECTS
    if kind in ("if", "elif", "while") and isinstance(stmt, (ast.If, ast.While)):
        roles = block_roles(stmt.body)  # what runs when the test holds (the else is another gate's)
        return next(iter(roles)) if len(roles) == 1 else MIXED if roles else ENABLES
    if kind == "ifexp":
        value = getattr(stmt, "value", None)
        return SELECTS if isinstance(value, ast.IfExp) and _is_choice(value) else ENABLES
    if kind == "assign":
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        return SELECTS if _target_is_choice([t for t in targets if t is not None]) else ENABLES
    return ENABLES
