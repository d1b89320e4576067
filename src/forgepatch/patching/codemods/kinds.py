"""What the declarative edit kinds share: their site keys, the arch test they write, and the
module-level names that test needs.

Each kind is one codemod (``codemod = "..."`` in a ``.toml`` patch): ``arch-gate`` (alias
``widen``) adds an arch to a gate; ``narrow`` excludes arches from a family check; ``value``
makes a value arch-dependent; ``guard`` inserts an arch-gated statement. The arch test is
built by :mod:`forgepatch.patching.archtest` in the file's idiom.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from forgepatch.patching import archtest
from forgepatch.patching.codemods.arch_gate import _Replace
from forgepatch.patching.codemods.base import SiteCodemod
from forgepatch.patching.model import Status


def code_option(value: Any, where: str) -> str:
    """A Python expression or statement(s), as source (checked by parsing)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: expected Python code as a string")
    try:
        cst.parse_module(value if value.endswith("\n") else value + "\n")
    except cst.ParserSyntaxError as exc:
        raise ValueError(f"{where}: not Python: {str(exc).splitlines()[0][:80]}") from None
    return value.strip("\n")


def expression_option(value: Any, where: str) -> str:
    code = code_option(value, where)
    try:
        cst.parse_expression(code)
    except cst.ParserSyntaxError:
        raise ValueError(f"{where}: expected one Python expression") from None
    return code


def name_option(value: Any, where: str) -> str:
    if not isinstance(value, str) or not all(part.isidentifier() for part in value.split(".")):
        raise ValueError(f"{where}: expected a name (\"backend\", \"self.attention_backend\")")
    return value


def literal_option(value: Any, where: str) -> Any:
    if isinstance(value, (str, bool, int, float)):
        return value
    raise ValueError(f"{where}: expected a string, number or true/false")


def literal_code(value: Any) -> str:
    """A TOML value as Python source (strings in double quotes, as SGLang writes them)."""
    if isinstance(value, str):
        return f'"{value}"' if not any(c in value for c in '"\\\n') else repr(value)
    return repr(value)


class ArchEditCodemod(SiteCodemod):
    """A kind that writes an arch test (``when``, default the patch's arches)."""

    covers_gates = False  # not a widening: the gate-coverage self-check is for arch-gate patches
    site_keys: dict = {"when": lambda v, w: archtest.check_arches(v, w)}

    def arches_of(self, site) -> tuple[str, ...]:
        return site.option("when") or tuple(self.patch.arches)

    def test_for(self, arches, ctx) -> str:
        """The test's source; what it needs is recorded by :meth:`used` once an edit lands."""
        code, needs = archtest.arch_test(arches, ctx)
        ctx.state.setdefault("archtest_pending", {})[code] = needs
        return code

    @staticmethod
    def used(ctx, test: str) -> None:
        archtest.record(ctx, ctx.state.get("archtest_pending", {}).get(test, []))

    @staticmethod
    def land(func, mapping: dict, ctx, site, symbol, what: str):
        """Replace each node of ``mapping`` in ``func``; one that did not land is reported
        ``incomplete`` (the self-check: never an edit claimed but not made). None: nothing to do."""
        if not mapping:
            return None
        replacer = _Replace(mapping, {**ctx.parents, func.body: func})
        edited = func.visit(replacer)
        for node in mapping:
            if node not in replacer.done:
                ctx.report(site.name, Status.INCOMPLETE, None, symbol,
                           f"self-check: {what} did not land in the function", line=ctx.line(node))
        return edited

    def finalize_module(self, module: cst.Module, ctx) -> cst.Module:
        return archtest.provide(module, ctx)


def statement_of(node: cst.CSTNode, parents: dict) -> cst.CSTNode:
    """The simple statement (or the ``if``/``while`` header test) ``node`` sits in."""
    child, cur = node, parents.get(node)
    while cur is not None:
        if isinstance(cur, (cst.If, cst.While)) and child is cur.test:
            return cur.test
        if isinstance(cur, cst.SimpleStatementLine):
            return cur
        if isinstance(cur, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            break
        child, cur = cur, parents.get(cur)
    return node


class Parents(cst.CSTVisitor):
    """child -> parent for every node under a function (nested defs included)."""

    def __init__(self) -> None:
        self.parents: dict = {}
        self.stack: list = []
        self.order: list = []

    def on_visit(self, node) -> bool:
        if self.stack:
            self.parents[node] = self.stack[-1]
        self.stack.append(node)
        self.order.append(node)
        return True

    def on_leave(self, original_node) -> None:
        self.stack.pop()


def walk(func: cst.FunctionDef) -> Parents:
    visitor = Parents()
    func.visit(visitor)
    return visitor
