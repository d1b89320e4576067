"""The public API for custom ``.py`` codemods: what a ``patches/<id>.py`` may rely on.

Versioned: :data:`API_VERSION` changes its major number when a name here is removed or
changes meaning (a patch may check ``assert api.API_VERSION.startswith("1.")``); names are
only added within a major version. Everything else in ``forgepatch`` is internal.

A codemod is a :class:`SiteCodemod` subclass (``Codemod``) whose ``edit_function(func, site,
symbol, ctx)`` gets each function the engine found for a site (by qualified name, in the
site's modules, naming a marker in code) and returns the edited function or None; its
``finalize_module(module, ctx)`` adds what the edits need at module level. This module gives
the pieces every such codemod needs:

- :func:`find_function` / :func:`names_marker`: find a site by qualified name and marker;
- :func:`arch_test`: an expression true exactly on some arches, in the file's idiom, whose
  names :func:`provide` makes resolvable in ``finalize_module``;
- :func:`add_import`: import a name the way the file already imports;
- :func:`replace`: replace an expression (or statement) inside a function;
- :func:`insert_first`: insert a statement as the first of a function (after its docstring);
- :func:`define_once`: add a module-level ``def`` once, after the imports;
- :func:`edited` / :func:`already`: declare what was edited (the engine holds a codemod to
  it: a change without an ``edited`` report, or a report without a change, is ``incomplete``).
"""

from __future__ import annotations

from typing import Iterable

import libcst as cst

from forgepatch.patching import archtest
from forgepatch.patching.codemods.arch_gate import module_binds
from forgepatch.patching.codemods.base import FileContext, SiteCodemod, insert_definition, node_names_any
from forgepatch.patching.model import Status

API_VERSION = "1.0"

__all__ = ["API_VERSION", "FileContext", "SiteCodemod", "Status", "add_import", "already", "arch_test",
           "define_once", "edited", "find_function", "insert_first", "names_marker", "provide", "replace"]


# -- finding a site ---------------------------------------------------------------------------
def names_marker(node: cst.CSTNode, markers: Iterable[str]) -> bool:
    """Does the code under ``node`` name one of ``markers`` (a name, attribute, keyword or a
    word in a non-doc string; never a comment or docstring)?"""
    return node_names_any([node], tuple(markers))


def find_function(module: cst.Module, qualname: str, markers: Iterable[str] = ()) -> cst.FunctionDef | None:
    """The function ``qualname`` (``"Class.method"``, ``"outer.inner"`` or ``"function"``) of
    ``module`` whose code names one of ``markers`` (any, when none are given); None if absent.
    More than one such function is an error (ValueError): a site must be one place."""
    markers = tuple(markers)
    found = []

    def walk(body, prefix):
        for stmt in body:
            if isinstance(stmt, cst.FunctionDef):
                name = prefix + [stmt.name.value]
                if ".".join(name) == qualname and (not markers or names_marker(stmt, markers)):
                    found.append(stmt)
                walk(stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else [], name)
            elif isinstance(stmt, cst.ClassDef):
                walk(stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else [], prefix + [stmt.name.value])
            elif isinstance(stmt, (cst.If, cst.Try, cst.With)):
                walk(getattr(stmt.body, "body", []), prefix)

    walk(module.body, [])
    if len(found) > 1:
        raise ValueError(f"{len(found)} functions {qualname} name {', '.join(markers) or 'anything'}: not one site")
    return found[0] if found else None


# -- arch tests and imports -----------------------------------------------------------------
def arch_test(ctx: FileContext, arches: Iterable[str]) -> cst.BaseExpression:
    """An expression true exactly on ``arches`` (registry names), in the file's idiom: the
    family predicate as the file spells it (``{"sm120", "sm121"}``), an exact predicate of the
    tree (``is_sm121()``), or the compute capability. Call :func:`provide` from
    ``finalize_module`` so the names it uses resolve."""
    code, needs = archtest.arch_test(tuple(arches), ctx)
    archtest.record(ctx, needs)
    return cst.parse_expression(code)


def provide(module: cst.Module, ctx: FileContext) -> cst.Module:
    """Bind the names :func:`arch_test` used (imports next to the file's own, else helpers)."""
    return archtest.provide(module, ctx)


def add_import(module: cst.Module, ctx: FileContext, name: str, source: str = "sglang.srt.utils") -> cst.Module:
    """Import ``name`` the way the file already imports (into its ``from M import ...`` whose
    module defines it in this tree, else ``from source import name`` after the imports);
    records it in ``ctx.provided``. LookupError if this tree does not define it in ``source``."""
    if module_binds(module, name):
        return module
    return archtest.add_import(module, ctx, name, source)


def define_once(module: cst.Module, ctx: FileContext, name: str, source: str) -> cst.Module:
    """Add the top-level ``def name`` (its source) after the imports, unless the module has it."""
    if any(isinstance(s, cst.FunctionDef) and s.name.value == name for s in module.body):
        return module
    ctx.provided.append(f"defined {name}() after the imports")
    return insert_definition(module, source)


# -- editing ----------------------------------------------------------------------------------
def replace(func: cst.FunctionDef, old: cst.CSTNode, new: cst.CSTNode) -> cst.FunctionDef:
    """``func`` with the node ``old`` (a node of ``func`` itself) replaced by ``new``."""
    class _Has(cst.CSTVisitor):
        found = False

        def on_visit(self, node) -> bool:
            if node is old:
                _Has.found = True
            return not _Has.found

    func.visit(_Has())
    if not _Has.found:
        raise ValueError("replace: the node to replace is not in the function")
    return func.deep_replace(old, new)


def is_docstring(stmt: cst.CSTNode) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def insert_first(func: cst.FunctionDef, statement: str | cst.BaseStatement) -> cst.FunctionDef:
    """``func`` with ``statement`` as its first statement (after a docstring); the first
    statement's leading comment stays with it."""
    stmt = cst.parse_statement(statement if statement.endswith("\n") else statement + "\n") \
        if isinstance(statement, str) else statement
    body = list(func.body.body)
    i = 1 if body and is_docstring(body[0]) else 0
    return func.with_changes(body=func.body.with_changes(body=body[:i] + [stmt] + body[i:]))


def edited(ctx: FileContext, site, symbol: str, node: cst.CSTNode | None, detail: str) -> None:
    """Declare an edit at ``node`` of the site function ``symbol`` (status ``applied``)."""
    ctx.report(site.name, Status.APPLIED, node, symbol, detail)


def already(ctx: FileContext, site, symbol: str, node: cst.CSTNode | None, detail: str) -> None:
    """Declare that the site already has the edit (``absorbed-upstream`` on a pristine tree,
    else ``already-applied``)."""
    ctx.report(site.name, ctx.accepted(), node, symbol, detail)
