"""``codemod = "value"``: an arch-dependent value, written as a conditional expression.

``default_backend = "trtllm"`` becomes ``default_backend = "auto" if <sm120 test> else "trtllm"``.
A site names exactly one kind of place: ``assign`` (an assignment target: ``backend``,
``self.moe_runner_backend``), ``keyword`` (a call's keyword argument), ``default`` (a parameter's
default) or ``returns = true`` (the ``return`` statements); ``value`` is the new value (a string,
number or true/false), ``when`` the arches that get it (default the patch's), ``from`` (optional)
the value the place must hold now: places holding another value are not this site's. With
``markers`` a place counts only if its own statement names one.
"""

from __future__ import annotations

import libcst as cst

from forgepatch.patching import archtest
from forgepatch.patching.codemods.base import node_names_any
from forgepatch.patching.codemods.kinds import (
    ArchEditCodemod, literal_code, literal_option, name_option, statement_of, walk,
)
from forgepatch.patching.model import Status

PLACES = ("assign", "keyword", "default", "returns")


def _returns(value, where: str) -> bool:
    if value is not True:
        raise ValueError(f"{where}: expected true (the function's return statements)")
    return True


class ValueCodemod(ArchEditCodemod):
    site_keys = {**ArchEditCodemod.site_keys, "assign": name_option, "keyword": name_option,
                 "default": name_option, "returns": _returns, "value": literal_option, "from": literal_option}

    @staticmethod
    def check_site(site, where: str, arches) -> None:
        places = [p for p in PLACES if site.option(p) is not None]
        if len(places) != 1:
            raise ValueError(f"{where}: a value site names exactly one of {', '.join(PLACES)}")
        if site.option("value") is None:
            raise ValueError(f"{where}.value: needed (the value on the arch)")

    def edit_function(self, func, site, symbol, ctx):
        tree = walk(func)
        ctx.parents.update(tree.parents)
        new_code = literal_code(site.option("value"))
        old_code = None if site.option("from") is None else literal_code(site.option("from"))
        places = self._places(func, tree, site, ctx)
        if not places:
            return None
        test = self.test_for(self.arches_of(site), ctx)
        mapping = {}
        for node in places:
            current = ctx.code(node)
            if isinstance(node, cst.IfExp) and archtest.same_code(ctx.code(node.test), test) \
                    and archtest.same_code(ctx.code(node.body), new_code):
                ctx.report(site.name, ctx.accepted(), node, symbol, f"already {new_code} when {test}")
                continue
            if old_code is not None and not archtest.same_code(current, old_code):
                continue  # holds another value: not this site's place
            orelse = node.with_changes(lpar=[], rpar=[]) if isinstance(node, cst.IfExp) else node
            new = cst.IfExp(test=cst.parse_expression(test), body=cst.parse_expression(new_code), orelse=orelse,
                            lpar=list(node.lpar) if hasattr(node, "lpar") else [],
                            rpar=list(node.rpar) if hasattr(node, "rpar") else [])
            mapping[node] = new
            self.used(ctx, test)
            ctx.report(site.name, Status.APPLIED, node, symbol, f"{new_code} when {test} (else {' '.join(current.split())[:60]})")
        return self.land(func, mapping, ctx, site, symbol, "a value")

    def _places(self, func, tree, site, ctx) -> list:
        out = []
        assign, keyword, default = site.option("assign"), site.option("keyword"), site.option("default")
        if default:
            for param in (*func.params.params, *func.params.kwonly_params, *func.params.posonly_params):
                if param.name.value == default and param.default is not None:
                    ctx.parents[param.default] = param
                    out.append(param.default)
            return out
        for node in tree.order:
            value = None
            if assign and isinstance(node, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                if any(ctx.code(t).strip() == assign for t in targets) and node.value is not None:
                    value = node.value
            elif keyword and isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value == keyword:
                value = node.value
            elif site.option("returns") and isinstance(node, cst.Return) and node.value is not None:
                value = node.value
            if value is None:
                continue
            if site.markers and not node_names_any([statement_of(value, tree.parents)], site.markers):
                continue
            out.append(value)
        return out
