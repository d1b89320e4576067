"""The codemod interface every patch uses: edit a function found by symbol and marker.

The engine parses a candidate file, finds the functions a site names (in the site's
modules, naming one of its markers in code), and hands each (original node, positions
available) to ``edit_function``. A codemod reports every edit through ``ctx.report`` and
returns the edited function (or None: unchanged). The engine holds it to that: a function
changed without an ``applied`` report, or reported ``applied`` but unchanged, makes the
patch ``incomplete``. After all functions of a file are edited, ``finalize_module`` may add
module-level code (imports, constants, helpers) the edits need; it says what through
``ctx.provided``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import libcst as cst

from forgepatch.arch import Arch
from forgepatch.patching.markers import names_any
from forgepatch.patching.model import Status
from forgepatch.patching.predicates import find_gates


@dataclass
class Finding:
    site: str
    status: Status
    line: int | None
    symbol: str
    detail: str = ""
    file: str | None = None


@dataclass
class FileContext:
    """What a codemod may know about the file and tree it edits."""

    arch: Arch
    rel: str  # package-relative path of the file
    module: cst.Module  # the original parsed module (a status scan: the function's own)
    pristine: bool  # the tree is unmodified upstream: accepting gates = absorbed
    read: Callable[[str], "str | None"]  # read another file of this tree (resolution)
    positions: Any  # PositionProvider mapping for the function being edited (computed lazily)
    parents: Any  # child -> parent within that function (filled by the gate finder)
    line_offset: int = 0  # positions are per function: add this to get file lines
    func: Any = None  # the function being edited
    def_line: int | None = None  # the file line of its ``def``
    emit: bool = True  # False: a status scan, report what would change but build nothing
    findings: list[Finding] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)  # codemod scratch space per file
    text: str = ""  # the whole file as given (bindings are read from it in both modes)
    provided: list[str] = field(default_factory=list)  # module-level additions, said in words
    # what is read off a function node, shared by the patches of a series: ("positions",
    # func) -> its PositionProvider mapping, ("gates", body) -> its gates and parents,
    # ("tokens", node) -> the names and strings of its code (``names_any``). A libcst
    # node is immutable: a function no earlier patch rewrote is the same object, with the same
    # gates and positions relative to its ``def``. None: not shared (one patch)
    series_memo: dict[Any, Any] | None = None

    @property
    def dotted(self) -> str:
        parts = ["sglang"] + self.rel[:-3].split("/")
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def scope(self, func: cst.FunctionDef, def_line: int | None) -> None:
        """Point the context at ``func``. Positions are resolved only when a line is asked
        for: metadata over a 1,000-line function costs a tenth of a second."""
        self.func, self.def_line, self.positions, self.parents = func, def_line, None, {}

    def line(self, node: cst.CSTNode) -> int | None:
        if node is self.func:
            return self.def_line
        if self.positions is None and self.func is not None:
            memo = self.series_memo
            self.positions = memo.get(("positions", self.func)) if memo is not None else None
            if self.positions is None:
                self.positions = function_positions(self.func)
                if memo is not None:
                    memo[("positions", self.func)] = self.positions
            rel_def = self.positions[self.func.name].start.line
            self.line_offset = (self.def_line - rel_def) if self.def_line else 0
        try:
            return self.positions[node].start.line + self.line_offset
        except (KeyError, TypeError):
            return None

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def gates(self, body: cst.CSTNode) -> list:
        """``predicates.find_gates`` under ``body`` (a function's), its parents added to
        ``parents``; read once per node in a series."""
        memo = self.series_memo
        held = memo.get(("gates", body)) if memo is not None else None
        if held is None:
            parents: dict = {}
            held = (find_gates(body, parents), parents)
            if memo is not None:
                memo[("gates", body)] = held
        self.parents.update(held[1])
        return list(held[0])

    def names_any(self, nodes, markers) -> bool:
        """``node_names_any``; in a series each node's code tokens are read once."""
        memo = self.series_memo
        if memo is None:
            return node_names_any(nodes, markers)
        names: set[str] = set()
        strings: list[str] = []
        for node in nodes:
            held = memo.get(("tokens", node))
            if held is None:
                visitor = _Tokens()
                node.visit(visitor)
                held = memo[("tokens", node)] = (frozenset(visitor.names), tuple(visitor.strings))
            names |= held[0]
            strings += held[1]
        return names_any(names, strings, markers)

    def accepted(self) -> Status:
        """Status of a site that already accepts the arch."""
        return Status.ABSORBED if self.pristine else Status.ALREADY

    def report(self, site: str, status: Status, node: cst.CSTNode | None, symbol: str, detail: str = "",
               line: int | None = None) -> None:
        """Say what happened at ``node`` (or at ``line``): every edit must be reported."""
        if line is None and node is not None:
            line = self.line(node)
        self.findings.append(Finding(site, status, line, symbol, detail, self.rel))


class SiteCodemod:
    """Base class: subclass it in a ``patches/<id>.py`` as ``Codemod``."""

    def __init__(self, patch: Any) -> None:
        self.patch = patch

    def edit_function(self, func: cst.FunctionDef, site: Any, symbol: str, ctx: FileContext) -> cst.FunctionDef | None:
        raise NotImplementedError

    def finalize_module(self, module: cst.Module, ctx: FileContext) -> cst.Module:
        return module


def function_positions(func: cst.FunctionDef) -> Any:
    """libcst's ``PositionProvider`` ranges of every node of ``func`` (line 1: its first
    line), from the provider's own codegen pass. The same mapping as
    ``MetadataWrapper(cst.Module(body=[func])).resolve(PositionProvider)`` without the
    wrapper's walk over the whole tree for batchable providers (none here): ~half the cost
    (tests/test_positions.py holds the two equal on real functions)."""
    from libcst.metadata import PositionProvider

    provider = PositionProvider()
    provider._computed = {}
    provider._gen_impl(cst.Module(body=[func]))
    return provider._computed


# -- small helpers shared by codemods -------------------------------------------------------
_DOC = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


class _Tokens(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.strings: list[str] = []

    def visit_Expr(self, node: cst.Expr) -> bool:
        return not isinstance(node.value, _DOC)  # a string statement is documentation

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.strings.append(node.raw_value)

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        self.strings.append(node.value)


def node_names_any(nodes, markers) -> bool:
    """Do the code tokens under ``nodes`` name one of ``markers``? (see ``patching.markers``)"""
    visitor = _Tokens()
    for node in nodes:
        node.visit(visitor)
    return names_any(visitor.names, visitor.strings, markers)


def first_non_import_index(module: cst.Module) -> int:
    """Index of the first top-level statement after the leading docstring/imports block."""
    for i, stmt in enumerate(module.body):
        if isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) or (i == 0 and isinstance(s, cst.Expr))
            for s in stmt.body
        ):
            continue
        return i
    return len(module.body)


def insert_definition(module: cst.Module, code: str) -> cst.Module:
    """Insert a top-level ``def``/``class`` (source ``code``) right after the imports block,
    with the two blank lines around it that the file's style (PEP 8) expects."""
    body = list(module.body)
    i = first_non_import_index(module)
    top = i == 0 and not module.header  # the file's first line: no blank lines above it
    new = cst.parse_statement(code).with_changes(leading_lines=[] if top else [cst.EmptyLine(), cst.EmptyLine()])
    if i < len(body):
        nxt = body[i]
        blank = sum(1 for ln in nxt.leading_lines if ln.comment is None)
        if blank < 2:
            body[i] = nxt.with_changes(leading_lines=[cst.EmptyLine()] * (2 - blank) + list(nxt.leading_lines))
    return module.with_changes(body=body[:i] + [new] + body[i:])
