"""``codemod = "narrow"``: exclude arches from a family check.

``is_sm100_supported()`` admits sm103 (SGLang tests ``major == 10``); where sm103 must not pass,
each family predicate the site selects becomes ``(<predicate> and not <sm103 test>)``, the test
in the file's idiom (:mod:`forgepatch.patching.archtest`). Only the predicate is narrowed, so an
``or`` chain keeps its other operands (``is_sm90 or (is_sm100 and not T)``) and a mixed check
(``nnodes == 1 or is_sm100_supported()``) too. Keys of a site: ``exclude`` (arches, default the
patch's), ``family`` (the predicate family to narrow, default the one that admits them), or
``predicates`` (identifiers of any other predicate: ``["is_blackwell_supported", "is_blackwell"]``,
called, read as a flag or as an attribute). With ``markers``, a check counts only if its
gated code (an ``if`` test and the simple statements of its body, or its statement) names one.
"""

from __future__ import annotations

import libcst as cst

from forgepatch.arch import ARCHES
from forgepatch.patching import archtest
from forgepatch.patching.codemods.arch_gate import gated_unit
from forgepatch.patching.codemods.kinds import ArchEditCodemod, walk
from forgepatch.patching.model import Status
from forgepatch.patching.predicates import Gate


def _family(value, where: str) -> str:
    fams = {a.gate_family for a in ARCHES.values()}
    if value not in fams:
        raise ValueError(f"{where}: expected a predicate family ({', '.join(sorted(fams))})")
    return value


def _identifiers(value, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) and v.isidentifier() for v in items):
        raise ValueError(f"{where}: expected predicate names (\"is_blackwell_supported\")")
    return tuple(items)


class _Named(cst.CSTVisitor):
    """Uses of the named predicates: ``f()``, ``x.f()``, ``x.f`` and a bare ``f``."""

    def __init__(self, names) -> None:
        self.names, self.found = set(names), []

    def visit_Call(self, node) -> bool:
        func = node.func
        name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
        if name in self.names:
            self.found.append(node)
            return False
        return True

    def visit_Attribute(self, node) -> bool:
        if node.attr.value in self.names:
            self.found.append(node)
            return False
        return True

    def visit_Name(self, node) -> None:
        if node.value in self.names:
            self.found.append(node)


class NarrowCodemod(ArchEditCodemod):
    site_keys = {"exclude": archtest.check_arches, "family": _family, "predicates": _identifiers}

    @staticmethod
    def check_site(site, where: str, arches) -> None:
        if site.option("family") and site.option("predicates"):
            raise ValueError(f"{where}: give 'family' or 'predicates', not both")

    def excluded(self, site) -> tuple[str, ...]:
        return site.option("exclude") or tuple(self.patch.arches)

    def family(self, site) -> str:
        return site.option("family") or ARCHES[self.excluded(site)[0]].gate_family

    def edit_function(self, func, site, symbol, ctx):
        family = None if site.option("predicates") else self.family(site)
        ctx.parents[func.body] = func
        candidates = []
        if family is None:
            named = _Named(site.option("predicates"))
            func.body.visit(named)
            ctx.gates(func.body)  # fills the parents
            candidates = [(Gate(n, "lone", []), _Pred(n)) for n in named.found]
        else:
            candidates = [(gate, pred) for gate in ctx.gates(func.body)
                          for pred in gate.predicates if pred.family == family]
        ctx.parents.update(walk(func).parents)  # every node: the gate finder skips predicates in a chain
        chosen = [(gate, pred) for gate, pred in candidates
                  if not site.markers or ctx.names_any(gated_unit(pred.node, ctx), site.markers)]
        if not chosen:
            return None
        if site.gates == "one" and len(chosen) > 1:
            lines = ", ".join(str(ctx.line(p.node)) for _, p in chosen)
            ctx.report(site.name, Status.DRIFT, func, symbol,
                       f'ambiguous: {len(chosen)} {family or "named"} checks (lines {lines}); the site says gates = "one"')
            return None
        test = self.test_for(self.excluded(site), ctx)
        mapping = {}
        for gate, pred in chosen:
            line = ctx.line(pred.node)
            if self._already(pred.node, test, ctx):
                ctx.report(site.name, ctx.accepted(), None, symbol, f"already excludes: not {test}", line=line)
                continue
            inner = pred.node.with_changes(lpar=[], rpar=[])
            new = cst.BooleanOperation(left=inner, operator=cst.And(),
                                       right=cst.UnaryOperation(cst.Not(), cst.parse_expression(test)))
            if self._needs_parens(pred.node, ctx):
                new = new.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            mapping[pred.node] = new
            self.used(ctx, test)
            ctx.report(site.name, Status.APPLIED, None, symbol,
                       f"narrowed {ctx.code(pred.node)}: and not {test}", line=line)
        return self.land(func, mapping, ctx, site, symbol, "a narrowed check")

    @staticmethod
    def _needs_parens(node, ctx) -> bool:
        """``P and not T`` may stand bare as an ``if`` test or an ``and`` operand."""
        parent = ctx.parents.get(node)
        if isinstance(parent, (cst.If, cst.While)) and parent.test is node:
            return bool(node.lpar)
        if isinstance(parent, cst.BooleanOperation) and isinstance(parent.operator, cst.And):
            return bool(node.lpar)
        return True

    @staticmethod
    def _already(node, test: str, ctx) -> bool:
        """Is ``node`` an operand of an ``and`` chain that already says ``not <test>``?"""
        up = ctx.parents.get(node)
        while isinstance(up, cst.BooleanOperation) and isinstance(up.operator, cst.And):
            for side in (up.left, up.right):
                if isinstance(side, cst.UnaryOperation) and isinstance(side.operator, cst.Not) \
                        and archtest.same_code(ctx.code(side.expression), test):
                    return True
            up = ctx.parents.get(up)
        return False


class _Pred:
    def __init__(self, node) -> None:
        self.node = node
