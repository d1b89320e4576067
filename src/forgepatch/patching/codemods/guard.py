"""``codemod = "guard"``: insert an arch-gated statement at a marked place.

``if backend == "auto" and <sm120 test>: backend = "triton"``. Keys of a site: ``statement``
(the code to run on the arch), ``condition`` (optional, tested first), ``when`` (arches,
default the patch's; ``{arg0}`` in ``statement`` or ``condition`` is the function's first
parameter: ``self`` in a method, ``server_args`` in a function), and where: ``before`` (a marker: before the first statement of the
function whose own code names it; a compound statement counts by its header) or, by default,
the first statement of the function (after its docstring). A guard already there (same
code) is ``already-applied``.
"""

from __future__ import annotations

import libcst as cst

from forgepatch.patching.codemods.base import node_names_any
from forgepatch.patching.codemods.kinds import ArchEditCodemod, code_option, expression_option
from forgepatch.patching.model import Status


def _marker(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: expected a marker (a name or string the statement's code holds)")
    return value


def _header(stmt) -> list:
    """The code of a statement itself, not of the blocks nested in it."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return [stmt]
    if isinstance(stmt, (cst.If, cst.While)):
        return [stmt.test]
    if isinstance(stmt, (cst.For,)):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, cst.With):
        return list(stmt.items)
    return []


def _blocks(stmt):
    """The statement lists nested directly in a compound statement."""
    for name in ("body", "orelse", "finalbody"):
        part = getattr(stmt, name, None)
        if isinstance(part, cst.IndentedBlock):
            yield part
        elif isinstance(part, (cst.Else, cst.Finally)):
            yield part.body
        elif isinstance(part, cst.If):  # elif
            yield from [part.body, *_blocks(part)]
    for handler in getattr(stmt, "handlers", ()) or ():
        yield handler.body


def is_docstring(stmt) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


class GuardCodemod(ArchEditCodemod):
    site_keys = {**ArchEditCodemod.site_keys, "statement": code_option, "condition": expression_option,
                 "before": _marker}

    @staticmethod
    def check_site(site, where: str, arches) -> None:
        if site.option("statement") is None:
            raise ValueError(f"{where}.statement: needed (the code to run on the arch)")

    def guard_code(self, site, ctx, func) -> str:
        params = [*func.params.posonly_params, *func.params.params]
        arg0 = params[0].name.value if params else ""
        test = self.test_for(self.arches_of(site), ctx)
        self._test = test
        cond = (site.option("condition") or "").replace("{arg0}", arg0)
        head = test
        if cond:
            parsed = cst.parse_expression(cond)
            loose = isinstance(parsed, (cst.IfExp, cst.Lambda, cst.NamedExpr)) or (
                isinstance(parsed, cst.BooleanOperation) and isinstance(parsed.operator, cst.Or))
            head = f"({cond}) and {test}" if loose else f"{cond} and {test}"
        statement = site.option("statement").replace("{arg0}", arg0)
        body = "".join(f"    {ln}\n" if ln.strip() else "\n" for ln in statement.splitlines())
        return f"if {head}:\n{body}"

    def edit_function(self, func, site, symbol, ctx):
        code = self.guard_code(site, ctx, func)
        guard = cst.parse_statement(code)
        marker = site.option("before")
        block, index = self._place(func.body, marker) if marker else (func.body, self._start(func.body))
        if block is None:
            return None  # no statement names the marker: not this site's function
        for stmt in self._all(func.body):
            if isinstance(stmt, cst.If) and " ".join(ctx.code(stmt).split()) == " ".join(code.split()):
                ctx.report(site.name, ctx.accepted(), stmt, symbol, "guard already present")
                return None
        body = list(block.body)
        anchor = body[index] if index < len(body) else None
        report_at = anchor if anchor is not None else func
        anchor_line = ctx.line(anchor) if anchor is not None else None
        if anchor is not None and anchor.leading_lines:
            # the blank lines before the anchor now come before the guard; its comments stay with it
            lead = list(anchor.leading_lines)
            k = next((i for i, ln in enumerate(lead) if ln.comment is not None), len(lead))
            guard = guard.with_changes(leading_lines=lead[:k])
            body[index] = anchor = anchor.with_changes(leading_lines=lead[k:])
        new_block = block.with_changes(body=body[:index] + [guard] + body[index:])
        self.used(ctx, self._test)
        where = f"before line {anchor_line}" if anchor is not None and marker else "first in the function"
        ctx.report(site.name, Status.APPLIED, report_at, symbol,
                   f"inserted guard {where}: if {code.split(':', 1)[0][3:]}")
        if block is func.body:
            return func.with_changes(body=new_block)
        return func.with_changes(body=func.body.deep_replace(block, new_block))

    @staticmethod
    def _start(block) -> int:
        body = list(block.body)
        return 1 if body and is_docstring(body[0]) else 0

    def _place(self, block, marker):
        for i, stmt in enumerate(block.body):
            if node_names_any(_header(stmt), (marker,)):
                return block, i
            for inner in _blocks(stmt):
                found, j = self._place(inner, marker)
                if found is not None:
                    return found, j
        return None, 0

    def _all(self, block):
        for stmt in block.body:
            yield stmt
            for inner in _blocks(stmt):
                yield from self._all(inner)
