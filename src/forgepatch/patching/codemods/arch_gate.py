"""The arch-gate codemod: widen a located arch gate with the target arch, in its own idiom.

``(_is_sm90_supported or _is_sm100_supported)`` becomes
``(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)``; the call and
``get_platform().is_smXX`` idioms likewise. The new name is then made resolvable: a module
constant mirroring its sibling, an import from the module the sibling comes from when that
module provides the name in THIS tree, or else a local helper built from the arch registry.
A name the file already binds is used as what it is (:mod:`forgepatch.patching.bindings`): a
function is called, a flag is not, and a binding that cannot be classified is ``unverified``.
Every gate of the feature in a site function is widened in one pass (or, for a site with
``gates = "one"``, more than one is ambiguous drift). Mixed disjunctions
(``nnodes == 1 or is_sm100_supported()``) and lone sm100-only predicates are never widened.
"""

from __future__ import annotations

import re

import libcst as cst

from forgepatch.arch import ARCHES
from forgepatch.patching.codemods.base import (
    FileContext, SiteCodemod, first_non_import_index, insert_definition, node_names_any,
)
from forgepatch.patching.astview import SIBLINGS
from forgepatch.patching.model import FALLBACK_HELPER, Status
from forgepatch.patching.predicates import Gate, Predicate, find_gates, or_operands, predicate, rename_family
from forgepatch.patching.bindings import BOOL, CLASS, FUNCTION, IMPORT, UNKNOWN, VALUE, binding, resolved
from forgepatch.patching.resolve import absolute_module, find_definition



def gated_unit(node: cst.CSTNode, ctx: FileContext) -> list[cst.CSTNode]:
    """The code a gate guards: an ``if`` test plus the simple statements of its body, or the
    whole simple statement (``return``/assignment) the gate sits in."""
    child, cur = node, ctx.parents.get(node)
    while cur is not None:
        if isinstance(cur, (cst.If, cst.While)) and child is cur.test:
            return [cur.test] + [s for s in cur.body.body if isinstance(s, cst.SimpleStatementLine)]
        if isinstance(cur, cst.SimpleStatementLine):
            return [cur]
        if isinstance(cur, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            break
        child, cur = cur, ctx.parents.get(cur)
    return [node]


def normalised(code: str) -> str:
    """An expression's code in ``ast.unparse``'s spelling (what ``ignore.gate`` is matched
    against, as the self-check spells gates)."""
    import ast

    try:
        return ast.unparse(ast.parse(code.strip(), mode="eval"))
    except SyntaxError:
        return " ".join(code.split())


def within_named(node: cst.CSTNode, func: cst.CSTNode, markers: tuple[str, ...], ctx: FileContext) -> bool:
    """Does ``node`` sit inside a branch, ``with`` or call (below ``func``) that names one
    of ``markers``? A branch counts for its own body only: the gate must be under the
    ``if``/``elif``/``while`` whose test names the marker, not in its ``else``."""
    child, cur = node, ctx.parents.get(node)
    while cur is not None and cur is not func:
        if isinstance(cur, (cst.If, cst.While)) and child is cur.body:
            if node_names_any([cur.test], markers):
                return True
        elif isinstance(cur, cst.With) and child is cur.body:
            if node_names_any(list(cur.items), markers):
                return True
        elif isinstance(cur, cst.Call) and child is not cur.func:
            if node_names_any([cur.func], markers) or node_names_any(
                    [a for a in cur.args if a is not child and a.value is not child], markers):
                return True
        child, cur = cur, ctx.parents.get(cur)
    return False


def gate_line(gate: Gate, ctx: FileContext) -> int | None:
    """The line a gate is reported at: its first operand's (what ``ast`` calls the gate's
    line, so the self-check and the codemod name the same line)."""
    return ctx.line(or_operands(gate.node)[0])


class _Replace(cst.CSTTransformer):
    """Swap many original nodes at once, rebuilding only the nodes on the way down to them
    (``deep_replace`` rebuilds the whole function, so a second replacement on its result
    would match nothing, and a 1,000-line function costs a tenth of a second per gate)."""

    def __init__(self, mapping: dict, parents: dict) -> None:
        self.mapping, self.done, self.path = mapping, set(), set()
        for node in mapping:
            up = parents.get(node)
            while up is not None and up not in self.path:
                self.path.add(up)
                up = parents.get(up)

    def on_visit(self, node) -> bool:
        return node in self.path

    def on_leave(self, original_node, updated_node):
        new = self.mapping.get(original_node)
        if new is not None:
            self.done.add(original_node)
            return new
        return updated_node


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
    """Is ``name`` defined, assigned or imported at the top level of ``module`` (module-level
    ``if``/``try``/``with`` blocks included, as :mod:`forgepatch.patching.bindings` reads it)?"""
    return _block_binds(module.body, name)


def _block_binds(body, name: str) -> bool:
    for stmt in body:
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
        blocks = []
        if isinstance(stmt, (cst.If, cst.With, cst.For, cst.While, cst.Try, cst.TryStar)):
            blocks.append(stmt.body)
            orelse = getattr(stmt, "orelse", None)
            while orelse is not None:
                blocks.append(orelse.body)
                orelse = getattr(orelse, "orelse", None) if isinstance(orelse, cst.If) else None
            blocks += [h.body for h in getattr(stmt, "handlers", ())]
            if getattr(stmt, "finalbody", None) is not None:
                blocks.append(stmt.finalbody.body)
        if any(isinstance(b, cst.IndentedBlock) and _block_binds(b.body, name) for b in blocks):
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

    covers_gates = True  # the self-check looks for this feature's gates left rejecting the arch

    # -- per function -------------------------------------------------------------------
    def edit_function(self, func, site, symbol, ctx):
        target = ctx.arch.gate_family
        ctx.parents[func.body] = func
        chosen = [gate for gate in ctx.gates(func.body)
                  if self._eligible(gate, site, target)
                  and (not site.markers or ctx.names_any(gated_unit(gate.node, ctx), site.markers))
                  and (not site.within or within_named(gate.node, func, site.within, ctx))]
        chosen = [gate for gate in chosen if not self._ignored(gate, site, symbol, ctx)]
        if not chosen:
            return None
        rejecting = [g for g in chosen if not g.accepts(target)]
        if site.gates == "one" and len(rejecting) > 1:  # a gate that already admits the arch does not count
            lines = ", ".join(str(gate_line(g, ctx)) for g in rejecting)
            ctx.report(site.name, Status.DRIFT, func, symbol,
                       f'ambiguous: {len(rejecting)} gates of the feature still reject {target} (lines {lines}); '
                       f'the site says gates = "one"')
            return None
        mapping = {}
        for gate in chosen:
            line = gate_line(gate, ctx)
            if gate.accepts(target):
                ctx.report(site.name, ctx.accepted(), None, symbol, f"gate already accepts {target}", line=line)
                continue
            operand, problem = self._operand(self._sibling(gate), target, ctx, site.name)
            if operand is None:
                status, why, where = problem
                ctx.report(site.name, status, None, symbol, why, line=where or line)
                continue
            mapping[gate.node] = self._widen(gate, operand)
            ctx.report(site.name, Status.APPLIED, None, symbol, f"added {ctx.code(operand)}", line=line)
        if not mapping:
            return None
        replacer = _Replace(mapping, {**ctx.parents, func.body: func})
        edited = func.visit(replacer)
        for node in mapping:
            if node not in replacer.done:  # reported above, yet not in the result: say so
                ctx.report(site.name, Status.INCOMPLETE, None, symbol,
                           "self-check: a widened gate did not land in the function", line=ctx.line(node))
        return edited

    def _ignored(self, gate: Gate, site, symbol: str, ctx: FileContext) -> bool:
        """``[[ignore]]`` means "never edit this gate": a gate a rule names is reported
        ``ignored`` (with the rule's reason) and left as it is."""
        rules = getattr(self.patch, "ignore", ()) or ()
        if not rules:
            return False
        code = normalised(ctx.code(gate.node))
        rule = next((r for r in rules if r.matches(ctx.rel, symbol, code)), None)
        if rule is None:
            return False
        ctx.report(site.name, Status.IGNORED, None, symbol, f"`{code}` left as it is; ignored: {rule.reason}",
                   line=gate_line(gate, ctx))
        return True

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

    def _operand(self, sibling: Predicate, target: str, ctx: FileContext, site: str):
        """(the new predicate in the sibling's idiom, None) or (None, (status, why, line)).
        By what the file binds the name to (:mod:`forgepatch.patching.bindings`): a function
        is called, a flag is used as it is, an unbound name is provided when the module is
        finished; anything else is refused: drift for a known kind that is neither (a class,
        a literal), ``unverified`` at the binding's line for a binding it cannot classify."""
        needs = ctx.state.setdefault("needs", {})
        new = rename_family(sibling.node, sibling.family, target)
        if sibling.idiom == "constant":
            bound = self._kind(new.value, ctx)
            if bound is None:
                needs.setdefault(("constant", new.value), sibling.name)
                return new, None
            if bound.kind == FUNCTION:
                return cst.Call(func=cst.Name(new.value)), None
            if bound.kind == BOOL:
                return new, None
            return None, self._refusal(new.value, bound, f"cannot add {new.value}")
        if sibling.idiom == "call":
            if isinstance(new.func, cst.Attribute):  # `mod.is_sm100_supported()`: call the plain name
                new = cst.Call(func=cst.Name(ctx.arch.family_function))
            return self._callable(new, new.func.value, sibling.name, ctx)
        if self._attribute_available(sibling, target, ctx):
            return new, None
        name = ctx.arch.family_function  # the platform object lacks .is_smXX here
        return self._callable(cst.Call(func=cst.Name(name)), name, None, ctx)

    def _callable(self, call: cst.Call, name: str, sibling: str | None, ctx: FileContext):
        bound = self._kind(name, ctx)
        if bound is None:
            ctx.state["needs"].setdefault(("function", name), sibling)
            return call, None
        if bound.kind in (FUNCTION, IMPORT):  # IMPORT: from a module outside this tree, as the sibling's
            return call, None
        return None, self._refusal(name, bound, f"cannot call {name}()")

    @staticmethod
    def _refusal(name: str, bound, what: str) -> tuple[Status, str, int | None]:
        if bound.kind == UNKNOWN:
            return (Status.UNVERIFIED, f"{what}: {name} (line {bound.line}) is bound in a way forgepatch cannot "
                    f"classify ({bound.detail}); the gate is left as it is", bound.line)
        words = {BOOL: "a flag", CLASS: "a class", VALUE: "a value that is neither a flag nor callable",
                 IMPORT: "imported from a module this tree does not define"}[bound.kind]
        return Status.DRIFT, f"{what}: {name} is {words} here ({bound.detail}, line {bound.line})", None

    @staticmethod
    def _kind(name: str, ctx: FileContext):
        """How this file binds ``name`` (a :class:`~forgepatch.patching.bindings.Binding`,
        imports followed through the tree), or None when it does not."""
        return resolved(ctx.read, ctx.rel, ctx.text, name)

    @staticmethod
    def _attribute_available(sibling: Predicate, target: str, ctx: FileContext) -> bool:
        """``get_platform().is_sm120``: does the module defining get_platform know is_sm120?"""
        recv = sibling.node.value
        fn = recv.func if isinstance(recv, cst.Call) else recv
        name = fn.value if isinstance(fn, cst.Name) else None
        if name is None:
            return True
        attr = re.compile(rf"\b{ctx.arch.family_attribute}\b")
        bound = binding(ctx.text, name)
        if bound and bound.kind == IMPORT:
            module, _, orig = bound.detail.rpartition(":")
            level = len(module) - len(module.lstrip("."))
            where = find_definition(ctx.read, absolute_module(ctx.rel, module.lstrip("."), level), orig)
            text = ctx.read(where) if where else None
            return bool(text and attr.search(text))
        return bool(attr.search(ctx.text))

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
        ctx.provided.append(f"defined {ctx.code(line).strip()}")
        return module.with_changes(body=body[: anchor + 1] + [line] + body[anchor + 1 :])

    def _ensure_function(self, module, name, sibling, ctx):
        if module_binds(module, name):
            return module
        fam_sibling = sibling or f"is_{SIBLINGS[0]}_supported"
        for stmt, imp in top_imports(module):
            if fam_sibling in imported_names(imp):
                source = import_module(imp, ctx)
                if self._defines_function(ctx, source, name):
                    ctx.provided.append(f"imported {name} next to {fam_sibling} (from {source})")
                    return self._add_alias(module, stmt, imp, fam_sibling, name)
        if self._defines_function(ctx, "sglang.srt.utils", name):
            new = cst.parse_statement(f"from sglang.srt.utils import {name}")
            i = first_non_import_index(module)
            ctx.provided.append(f"imported {name} from sglang.srt.utils")
            return module.with_changes(body=list(module.body[:i]) + [new] + list(module.body[i:]))
        ctx.provided.append(f"defined a local {name}() {FALLBACK_HELPER}")
        return insert_definition(module, local_helper(name, ctx.arch.gate_family))

    @staticmethod
    def _defines_function(ctx: FileContext, module: str, name: str) -> bool:
        """Does ``module`` of this tree provide ``name`` as something callable (not a flag)?"""
        where = find_definition(ctx.read, module, name)
        text = ctx.read(where) if where else None
        if text is None:
            return False
        bound = resolved(ctx.read, where, text, name)
        return bound is None or bound.kind in (FUNCTION, IMPORT)

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
