"""FlashInfer's JIT arch lists: its JIT module builders pass ``supported_major_versions=[...]``
to pick their nvcc targets (the compute capabilities whose major is listed); a builder whose
list lacks the device's major has no target for it and fails (SGLang #15650: ``No supported
CUDA architectures found for major versions [9, 10]``).

Read with ``ast`` (nothing is imported). A list admits an arch when it lists the arch's major;
``None`` or an empty list admits every arch (FlashInfer's ``get_nvcc_flags_list`` filters only
on a non-empty list: checked on the 0.6.1 and 0.7.2 wheels); a value that is not a literal
list or tuple of ints cannot be evaluated here: ``unverified``, with its file:line, never a
guess; so is a file that names the keyword but does not parse or is not UTF-8 (one list at its
first mention). A module-level constant assigned exactly once to such a literal (``_SUPPORTED_MAJOR_VERSIONS
= [12]``), and ``list(...)``/``tuple(...)`` of one, is read as that literal.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path

KEYWORD = "supported_major_versions"
ADMITS, REJECTS, UNVERIFIED = "admits", "rejects", "unverified"


@dataclass(frozen=True)
class JitList:
    file: str  # package-relative
    line: int
    function: str  # the enclosing function, qualified (Class.method), "" at module level
    majors: tuple[int, ...] | None  # None: not a literal list of ints; (): None/[] (no filter: every arch)
    code: str  # the value as written

    def verdict(self, major: int) -> str:
        if self.majors is None:
            return UNVERIFIED
        return ADMITS if not self.majors or major in self.majors else REJECTS

    def to_json(self, major: int | None = None) -> dict:
        doc = {"file": self.file, "line": self.line, "function": self.function,
               "majors": list(self.majors) if self.majors is not None else None, "code": self.code}
        if major is not None:
            doc["verdict"] = self.verdict(major)
        return doc


def literal_majors(value: ast.AST) -> list[int] | None:
    """The ints of a literal list/tuple of ints; None for anything else."""
    if not isinstance(value, (ast.List, ast.Tuple)):
        return None
    if not all(isinstance(e, ast.Constant) and type(e.value) is int for e in value.elts):
        return None
    return [e.value for e in value.elts]


def read_lists(text: str, rel: str, keyword: str = KEYWORD) -> list[JitList]:
    """Every ``keyword=`` argument in ``text`` (a module that does not parse has none)."""
    if keyword not in text:
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [_unreadable(text, rel, keyword, "the module does not parse")]
    out: list[JitList] = []
    constants = _module_constants(tree)

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{scope}.{child.name}" if scope else child.name
            if isinstance(child, ast.keyword) and child.arg == keyword:
                majors = _value_majors(child.value, constants)
                out.append(JitList(rel, child.value.lineno, scope, None if majors is None else tuple(majors),
                                   ast.get_source_segment(text, child.value) or ast.dump(child.value)[:80]))
            visit(child, inner)

    visit(tree, "")
    return sorted(out, key=lambda j: j.line)


def _unreadable(text: str, rel: str, keyword: str, why: str) -> JitList:
    """A file that names ``keyword`` but cannot be read: one unverified list at its first
    mention (never an empty answer that reads as "no list here")."""
    line = next((n for n, ln in enumerate(text.splitlines(), 1) if keyword in ln), 1)
    return JitList(rel, line, "", None, f"<{why}>")


def lists_of_bytes(data: bytes, rel: str, keyword: str = KEYWORD) -> list[JitList]:
    """``read_lists`` of a file's bytes; a file that is not UTF-8 but names the keyword is
    one unverified list."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if keyword.encode() not in data:
            return []
        return [_unreadable(data.decode("utf-8", "replace"), rel, keyword, "not UTF-8")]
    return read_lists(text, rel, keyword)


def _module_constants(tree: ast.Module) -> dict[str, ast.AST]:
    """Names bound exactly once in the module, at its top level, by a plain assignment."""
    bound: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                   if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for t in targets:
            if isinstance(t, ast.Name):
                bound.setdefault(t.id, []).append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            for alias in getattr(node, "names", []):
                bound.setdefault((alias.asname or alias.name).split(".")[0], []).append(node)
            if hasattr(node, "name"):
                bound.setdefault(node.name, []).append(node)
    top = {id(n) for n in tree.body}
    return {name: nodes[0].value for name, nodes in bound.items()
            if len(nodes) == 1 and id(nodes[0]) in top and isinstance(nodes[0], (ast.Assign, ast.AnnAssign)) and nodes[0].value is not None}


def _value_majors(value: ast.AST, constants: dict[str, ast.AST]) -> list[int] | None:
    """``[10, 12]``, ``None`` (every arch: ``[]``), a once-bound module constant of one, or
    ``list(NAME)``/``tuple(NAME)``; None when it is anything else."""
    if isinstance(value, ast.Constant) and value.value is None:
        return []
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("list", "tuple")
            and len(value.args) == 1 and not value.keywords):
        value = value.args[0]
    if isinstance(value, ast.Name) and value.id in constants:
        value = constants[value.id]
    return literal_majors(value)


def scan(package: Path, keyword: str = KEYWORD) -> list[JitList]:
    """The lists of every ``.py`` file of ``package``, by file and line."""
    out: list[JitList] = []
    for dirpath, dirnames, filenames in os.walk(package):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = Path(dirpath, name)
                rel = path.relative_to(package).as_posix()
                try:
                    data = path.read_bytes()
                except OSError as exc:
                    out.append(JitList(rel, 1, "", None, f"<cannot read it: {exc.strerror or exc}>"))
                    continue
                out += lists_of_bytes(data, rel, keyword)
    return sorted(out, key=lambda j: (j.file, j.line))
