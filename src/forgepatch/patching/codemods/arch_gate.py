"""The arch-gate codemod: widen a located arch gate with the target arch, in its own idiom.

``(_is_sm90_supported or _is_sm100_supported)`` becomes
``(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)``; the call and
``get_platform().is_smXX`` idioms likewise. The new name is then made resolvable: a module
constant mirroring its sibling, an import from the module the sibling comes from when that
module provides the name in THIS tree, or else a local helper built from the arch registry.
Mixed disjunctions (``nnodes == 1 or is_sm100_supported()``) and lone sm100-only predicates
are never widened.
"""

from __future__ import annotations

import re

import libcst as cst

from forgepatch.arch import ARCHES
from forgepatch.patching.codemods.base import FileContext, SiteCodemod, first_non_import_index, insert_definition
from forgepatch.patching.model import Status
from forgepatch.patching.predicates import Gate, Predicate, find_gates, predicate, rename_family
from forgepatch.patching.resolve import absolute_module, find_definition

SIBLINGS = ("sm100", "sm90")  # families whose gates a new arch is added next to, preferred first


def marker_in(text: str, marker: str) -> bool:
    if re.fullmatch(r"\w+", marker):
        return re.search(rf"(?<!\w){re.escape(marker)}(?!\w)", text) is not None
    return marker in text


def gated_unit_text(node: cst.CSTNode, ctx: FileContext) -> str:
    """The code a gate guards: an ``if`` test plus the simple statements of its body, or the
    whole simple statement (``return``/assignment) the gate sits in."""
    child, cur = node, ctx.parents.get(node)
    while cur is not None:
        if isinstance(cur, (cst.If, cst.While)) and child is cur.test:
            body = [s for s in cur.body.body if isinstance(s, cst.SimpleStatementLine)]
            return ctx.code(cur.test) + "\n" + "\n".join(ctx.code(s) for s in body)
        if isinstance(cur, cst.SimpleStatementLine):
            return ctx.code(cur)
        if isinstance(cur, (cst.FunctionDef, cst.ClassDef)):
            break
        child, cur = cur, ctx.parents.get(cur)
    return ctx.code(node)


def top_imports(module: cst.Module) -> list[tuple[cst.SimpleStatementLine, cst.ImportFrom]]:
    out = []
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            out += [(stmt, s) for s in stmt.body if isinstance(s, cst.ImportFrom)]
    return out


def imported_names(imp: cst.ImportFrom) -> list[str]:
    if isinstance(imp.names, cst.ImportStar):
        return []
    return [(a.asname.name.value if a.asname else a.evaluated_name) for a in imp.names]


def import_module(imp: cst.ImportFrom, ctx: FileContext) -> str:
    dotted = cst.helpers.get_full_name_for_node(imp.module) if imp.module else ""
    return absolute_module(ctx.rel, dotted or "", len(imp.relative))


def module_binds(module: cst.Module, name: str) -> bool:
    """Is ``name`` defined, assigned or imported at the top level of ``module``?"""
    for stmt in module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == name:
            return True
        if isinstance(stmt, cst.SimpleStatementLine):
            for s in stmt.body:
                if isinstance(s, (cst.Assign, cst.AnnAssign)):
                    targets = [t.target for t in s.targets] if isinstance(s, cst.Assign) else [s.target]
                    if any(isinstance(t, cst.Name) and t.value == name for t in targets):
                        return True
                if isinstance(s, cst.ImportFrom) and name in imported_names(s):
                    return True
    return False


def local_helper(name: str, family: str) -> str:
    """A stand-in ``is_smXX_supported`` built from the arch registry (release lacks it)."""
    arch = ARCHES[family]
    code = (
        f"def {name}(device=None) -> bool:\n"
        f'    """forgepatch: stand-in for sglang.srt.utils.{name}, which this release lacks."""\n'
        "    import torch\n\n"
        "    if not torch.cuda.is_available():\n"
        "        return False\n"
        "    major, _ = torch.cuda.get_device_capability(device)\n"
        '    cuda = tuple(int(x) for x in (torch.version.cuda or "0.0").split(".")[:2])\n'
        f"    return major == {arch.cc[0]} and cuda >= {tuple(arch.min_cuda)}\n"
    )
    return code


class ArchGateCodemod(SiteCodemod):
    """Declarative patches (``codemod = "arch-gate"``) use this codemod."""

    # -- per function -------------------------------------------------------------------
    def edit_function(self, func, site, symbol, ctx):
        target = ctx.arch.gate_family
        edited, hits = func, 0
        ctx.parents[func.body] = func
        for gate in find_gates(func.body, ctx.parents):
            if not self._eligible(gate, site, target):
                continue
            if site.markers and not any(marker_in(gated_unit_text(gate.node, ctx), m) for m in site.markers):
                continue
            hits += 1
            if gate.accepts(target):
                ctx.report(site.name, ctx.accepted(), gate.node, symbol, f"gate already accepts {target}")
                continue
            if not ctx.emit:  # a status scan: say what would be added, build nothing
                sib = self._sibling(gate)
                new = ctx.code(rename_family(sib.node, sib.family, target))
                ctx.report(site.name, Status.APPLIED, gate.node, symbol, f"added {new}")
                continue
            operand = self._operand(self._sibling(gate), target, ctx)
            edited = edited.deep_replace(gate.node, self._widen(gate, operand))
            ctx.report(site.name, Status.APPLIED, gate.node, symbol, f"added {ctx.module.code_for_node(operand)}")
        return edited if hits and edited is not func else None

    @staticmethod
    def _eligible(gate: Gate, site, target: str) -> bool:
        if gate.kind == "mixed":
            return False  # never widen `nnodes == 1 or is_sm100_supported()`
        if gate.kind == "lone" and not site.lone:
            return False  # sm100-only gates stay sm100-only
        return bool(gate.families & (set(SIBLINGS) | {target}))

    @staticmethod
    def _sibling(gate: Gate) -> Predicate:
        for fam in SIBLINGS:
            for p in reversed(gate.predicates):
                if p.family == fam:
                    return p
        return gate.predicates[-1]

    @staticmethod
    def _widen(gate: Gate, operand: cst.BaseExpression) -> cst.BaseExpression:
        node = gate.node
        inner = node.with_changes(lpar=[], rpar=[])
        if gate.kind == "lone":
            lpar, rpar = list(node.lpar) or [cst.LeftParen()], list(node.rpar) or [cst.RightParen()]
        else:
            lpar, rpar = node.lpar, node.rpar
        return cst.BooleanOperation(left=inner, operator=cst.Or(), right=operand, lpar=lpar, rpar=rpar)

    def _operand(self, sibling: Predicate, target: str, ctx: FileContext) -> cst.BaseExpression:
        """The new predicate in the sibling's idiom, recording what must be made resolvable."""
        needs = ctx.state.setdefault("needs", {})
        new = rename_family(sibling.node, sibling.family, target)
        if sibling.idiom == "constant":
            needs.setdefault(("constant", new.value), sibling.name)
        elif sibling.idiom == "call":
            needs.setdefault(("function", ctx.arch.family_function), sibling.name)
        elif not self._attribute_available(sibling, target, ctx):
            name = ctx.arch.family_function  # the platform object lacks .is_smXX here
            needs.setdefault(("function", name), None)
            return cst.Call(func=cst.Name(name))
        return new

    @staticmethod
    def _attribute_available(sibling: Predicate, target: str, ctx: FileContext) -> bool:
        """``get_platform().is_sm120``: does the module defining get_platform know is_sm120?"""
        recv = sibling.node.value
        fn = recv.func if isinstance(recv, cst.Call) else recv
        name = fn.value if isinstance(fn, cst.Name) else None
        if name is None:
            return True
        for _stmt, imp in top_imports(ctx.module):
            if name in imported_names(imp):
                where = find_definition(ctx.read, import_module(imp, ctx), name)
                text = ctx.read(where) if where else None
                return bool(text and re.search(rf"\b{ctx.arch.family_attribute}\b", text))
        return bool(re.search(rf"\b{ctx.arch.family_attribute}\b", ctx.module.code))

    # -- per module ---------------------------------------------------------------------
    def finalize_module(self, module: cst.Module, ctx: FileContext) -> cst.Module:
        needs = ctx.state.get("needs", {})
        for (kind, name), sibling in list(needs.items()):
            if kind == "constant":
                module = self._ensure_constant(module, name, sibling, ctx)
        for (kind, name), sibling in list(ctx.state.get("needs", {}).items()):
            if kind == "function":
                module = self._ensure_function(module, name, sibling, ctx)
        return module

    def _ensure_constant(self, module, name, sibling, ctx):
        if module_binds(module, name):
            return module
        target = ctx.arch.gate_family
        body = list(module.body)
        anchor, value = None, None
        for i, stmt in enumerate(body):
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
                t = stmt.body[0].targets[0].target
                if isinstance(t, cst.Name) and (p := predicate(t)) and p.family in SIBLINGS:
                    anchor = i
                    if t.value == sibling:
                        value = stmt.body[0].value
        if value is None:  # sibling imported, not assigned here: define it from the function
            value = cst.Call(func=cst.Name(ctx.arch.family_function))
            ctx.state["needs"].setdefault(("function", ctx.arch.family_function), None)
            anchor = first_non_import_index(module) - 1
        else:
            fam = predicate(cst.Name(sibling)).family
            value = rename_family(value, fam, target)
            for p in find_gates(value):
                for pred in p.predicates:
                    if pred.family != target:
                        continue
                    if pred.idiom == "call":
                        ctx.state["needs"].setdefault(("function", pred.name), pred.name.replace(target, fam))
                    elif pred.idiom == "attribute":
                        sib = Predicate(rename_family(pred.node, target, fam), fam, "attribute", pred.name)
                        if not self._attribute_available(sib, target, ctx):
                            fname = ctx.arch.family_function
                            value = value.deep_replace(pred.node, cst.Call(func=cst.Name(fname)))
                            ctx.state["needs"].setdefault(("function", fname), None)
        line = cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=value)])
        return module.with_changes(body=body[: anchor + 1] + [line] + body[anchor + 1 :])

    def _ensure_function(self, module, name, sibling, ctx):
        if module_binds(module, name):
            return module
        fam_sibling = sibling or f"is_{SIBLINGS[0]}_supported"
        for stmt, imp in top_imports(module):
            if fam_sibling in imported_names(imp):
                if find_definition(ctx.read, import_module(imp, ctx), name):
                    return self._add_alias(module, stmt, imp, fam_sibling, name)
        if find_definition(ctx.read, "sglang.srt.utils", name):
            new = cst.parse_statement(f"from sglang.srt.utils import {name}")
            i = first_non_import_index(module)
            return module.with_changes(body=list(module.body[:i]) + [new] + list(module.body[i:]))
        return insert_definition(module, local_helper(name, ctx.arch.gate_family))

    @staticmethod
    def _add_alias(module, stmt, imp, sibling, name):
        names = list(imp.names)
        i = next(k for k, a in enumerate(names) if (a.asname.name.value if a.asname else a.evaluated_name) == sibling)
        ref = names[i]
        if i + 1 == len(names):  # sibling is last: it takes the separator style of the others
            sep = names[i - 1].comma if i > 0 else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            if isinstance(sep, cst.MaybeSentinel):
                sep = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            names[i] = ref.with_changes(comma=sep)
        new = cst.ImportAlias(name=cst.Name(name), comma=ref.comma)
        names.insert(i + 1, new)
        body = list(module.body)
        k = next(k for k, st in enumerate(body) if st is stmt)
        body[k] = stmt.with_changes(body=[imp.with_changes(names=names) if s is imp else s for s in stmt.body])
        return module.with_changes(body=body)
