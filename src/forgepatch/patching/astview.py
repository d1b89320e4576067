"""A file as the self-check reads it, with the standard library's ``ast``: its functions
(parsed one by one, on demand), its module-level assignments, and what their code names.

Independent of the libcst code that edits: the check and the edit do not share a parser.
"""

from __future__ import annotations

import ast
import bisect
import re
from functools import lru_cache
from typing import Iterable

from forgepatch.arch import SIBLING_FAMILIES as SIBLINGS  # the families a new arch is added next to
from forgepatch.patching.headers import defs_of
from forgepatch.patching.markers import Matcher

SIBLING_NEEDLES = tuple(f"is_{f}" for f in SIBLINGS)
_SIBLING_TEXT = re.compile("|".join(SIBLING_NEEDLES))


def _code_tokens(nodes: Iterable[ast.AST], keywords: bool = True):
    """("name", identifier) and ("string", value) for the code under ``nodes``, skipping
    documentation (a string that stands alone as a statement): what ``markers`` calls code.
    ``keywords``: a call's keyword names too (another function's parameters, not reads)."""
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
        elif keywords and isinstance(node, ast.keyword) and node.arg:
            yield "name", node.arg
        elif isinstance(node, ast.alias):
            for part in {*(node.asname or node.name).split("."), *node.name.split(".")}:
                yield "name", part
        stack.extend(ast.iter_child_nodes(node))


def names_marker(nodes: Iterable[ast.AST], match: Matcher, keywords: bool = True) -> bool:
    """Does the code under ``nodes`` name a marker? (stops at the first one)"""
    for kind, value in _code_tokens(nodes, keywords):
        if match.name(value) if kind == "name" else match.string(value):
            return True
    return False


def names(nodes: Iterable[ast.AST]) -> set[str]:
    return {value for kind, value in _code_tokens(nodes) if kind == "name"}


def function_nodes(tree: ast.Module, prefix: list[str] | None = None):
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
                for case in getattr(node, "cases", []) or []:
                    walk(case.body, names)

    walk(tree.body, list(prefix or []))
    return out


_TOP_ASSIGN = re.compile(r"^[A-Za-z_]\w*[ \t]*(?::[^=\n]*)?=(?!=)", re.M)
_TOP_START = re.compile(r"^(?![ \t#\n\r)\]}]|else\b|elif\b|except\b|finally\b|case\b)", re.M)


class View:
    """A file as far as the gate check reads it: functions parsed one by one, on demand (a
    7,000-line server_args.py costs 80 ms to parse whole, the few functions that matter a
    few ms); the whole file once a function cannot be cut out cleanly."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.defs = defs_of(text)
        self.parsed: dict[int, list] = {}  # header index -> [(function, qualified name)]
        self.ranges: list[tuple[int, int]] = []  # 0-based [first, end) lines of parsed blocks
        self.whole: list | None = None
        self._constants: list | None = None

    def functions(self, needles, names: set[str] | None = None, relevant=None) -> list:
        """Functions (nested ones included) whose code holds one of ``needles`` (and, with
        ``names``, is named in it; with ``relevant``, whose text it accepts), with the
        functions inside them."""
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
                    if not any(n in region[0] for n in needles) or (relevant and not relevant(region[0])):
                        continue
                    block, end = self.defs.block(i, region)
                    module = ast.parse("\n" * (line - 1) + block)  # lines as in the file
                    self.parsed[i] = function_nodes(module, self.defs.owners(i))
                    self.ranges.append((line - 1, end))
                    out += self.parsed[i]
                return out
            except (ValueError, SyntaxError):
                tree = ast.parse(self.text)  # SyntaxError here: Python cannot parse the file
                self.whole = function_nodes(tree)
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
def view(text: str) -> View:
    """The file ``text`` as the check reads it (memoised: the engine and the check share it)."""
    return View(text)


def site_functions_naming(text: str, wanted: set[str], markers: Iterable[str]) -> set[int] | None:
    """Lines of the ``def`` of each function named in ``wanted`` whose code names one of
    ``markers``; None when this Python cannot parse the file (the caller asks libcst)."""
    markers = list(markers)
    try:
        funcs = view(text).functions(markers, set(wanted))
    except SyntaxError:
        return None
    match = Matcher(markers)
    return {node.lineno for node, _q in funcs if node.name in wanted and names_marker([node], match)}
