"""Which expressions of a tree read the GPU architecture, and their verdicts per registry arch.

:class:`ArchReads` knows the tree's definitions (:class:`~forgepatch.gates.index.Index`) and
answers: does this expression read the arch (a capability query, a predicate, a name or
attribute built on one)? Is this definition built on arch reads (then the evaluator follows
it)? What is this condition on each arch (always / conditional / never)? Which predicates does
the tree define, and which names derived from arch reads must be searched for elsewhere?
"""

from __future__ import annotations

import ast
import re

from forgepatch.arch import ARCHES
from forgepatch.gates.bindings import Locals, statements
from forgepatch.gates.evaluate import Evaluator, Scope
from forgepatch.gates.index import Definition, Index
from forgepatch.gates.model import ALWAYS, CONDITIONAL, NEVER, Predicate
from forgepatch.gates.values import CAPABILITY_CALLS, UNKNOWN, Func, Partial, truth

PREDICATE_NAME = re.compile(r"^_?(is|has|supports?|check)_\w+$|_supported$")


class ArchReads:
    def __init__(self, index: Index):
        self.index = index
        self.evaluators = {name: Evaluator(index, arch.cc, self) for name, arch in ARCHES.items()}
        self._def_arch: dict[tuple, bool] = {}
        self._is_arch: dict[tuple, bool] = {}

    # -- the evaluators' policy: follow definitions built on arch reads -------------------
    def follows(self, d: Definition) -> bool:
        return self.def_is_arch(d)

    def follows_member(self, file: str, cls: str, attr: str) -> bool:
        return self.member_is_arch(file, cls, attr)

    # -- does an expression read the arch? ------------------------------------------------
    def def_is_arch(self, d: Definition) -> bool:
        key = (d.file, d.name, d.line)
        if key in self._def_arch:
            return self._def_arch[key]
        self._def_arch[key] = False  # cycle guard
        if isinstance(d.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            result = self._returns_arch(d.node, d.file, d.cls)
        else:
            result = self.is_arch(d.node, Scope(d.file, d.cls, {}))
        self._def_arch[key] = result
        return result

    def is_arch(self, node: ast.AST, scope: Scope, depth: int = 0) -> bool:
        key = (id(node), scope.key)
        hit = self._is_arch.get(key)
        if hit is not None:
            return hit
        self._is_arch[key] = False  # cycle guard
        result = self._is_arch_uncached(node, scope, depth) if depth <= 40 else False
        self._is_arch[key] = result
        return result

    def _is_arch_uncached(self, node: ast.AST, scope: Scope, depth: int) -> bool:
        if isinstance(node, ast.Call):
            name = _callee_name(node.func)
            if name in CAPABILITY_CALLS:
                return True
            if isinstance(node.func, ast.Attribute) and self._attr_is_arch(node.func, scope, depth):
                return True
            if self.is_arch(node.func, scope, depth + 1):
                return True
            return any(self.is_arch(a, scope, depth + 1) for a in node.args if isinstance(a, (ast.Name, ast.Call)))
        if isinstance(node, ast.Name):
            if node.id in scope.local:
                bound = scope.local[node.id]
                if isinstance(bound, tuple) and bound and bound[0] == "unpack":
                    bound = bound[1]
                return isinstance(bound, ast.AST) and self.is_arch(bound, scope, depth + 1)
            d = self.index.resolve(node.id, scope.file)
            return d is not None and self.def_is_arch(d)
        if isinstance(node, ast.Attribute):
            if self._attr_is_arch(node, scope, depth):
                return True
            return node.attr in ("major", "minor") and self.is_arch(node.value, scope, depth + 1)
        if isinstance(node, (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp, ast.Subscript, ast.Tuple)):
            return any(self.is_arch(c, scope, depth + 1) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr))
        return False

    def _attr_is_arch(self, node: ast.Attribute, scope: Scope, depth: int) -> bool:
        receiver = node.value
        if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            return scope.cls is not None and self.member_is_arch(scope.file, scope.cls, node.attr)
        alias = self.index.attribute_alias(node.attr)
        if alias is not None:
            if alias in CAPABILITY_CALLS:
                return True
            d = self.index.resolve(alias, scope.file)
            return d is not None and self.def_is_arch(d)
        if isinstance(receiver, ast.Name):  # module.NAME (deep_gemm_wrapper.DEEPGEMM_BLACKWELL)
            d = self.index.resolve(node.attr, scope.file)
            if d is not None and self.def_is_arch(d):
                return True
        return self.index.platform_method(node.attr) is not None and PREDICATE_NAME.match(node.attr) is not None

    def member_is_arch(self, file: str, cls: str, attr: str) -> bool:
        """``self.attr`` reads the arch: an attribute assigned from an arch read, or a
        predicate-named method that returns one."""
        key = ("member", file, cls, attr)
        if key in self._def_arch:
            return self._def_arch[key]
        self._def_arch[key] = False
        exprs = self.index.self_assignments(file, cls, attr)
        if exprs:
            result = any(self.is_arch(e, Scope(file, cls, {})) for e in exprs)
        else:
            method = self.index.method(file, cls, attr)
            result = method is not None and PREDICATE_NAME.match(attr) is not None and self._returns_arch(method, file, cls)
        self._def_arch[key] = result
        return result

    def _returns_arch(self, func, file: str, cls: str | None) -> bool:
        scope = Scope(file, cls, Locals(func))
        return any(self.is_arch(n.value, scope) for n in statements(func) if isinstance(n, ast.Return) and n.value is not None)

    def derived_names(self) -> tuple[list[str], dict[str, set[str]]]:
        """Names defined from arch reads: public module-level names (searched everywhere)
        and, per file, private module-level names and self attributes (searched there)."""
        public: set[str] = set()
        private: dict[str, set[str]] = {}
        for name, defs in self.index.defs.items():
            for d in defs:
                if self.def_is_arch(d):
                    if name.startswith("_"):
                        private.setdefault(d.file, set()).add(name)
                    else:
                        public.add(name)
        for (file, cls), attrs in self.index.classes():
            private.setdefault(file, set()).update(attr for attr in attrs if self.member_is_arch(file, cls, attr))
        return sorted(public), private

    # -- verdicts ---------------------------------------------------------------------------
    def verdicts(self, expr: ast.expr, scope: Scope) -> dict[str, str]:
        out = {}
        for name, ev in self.evaluators.items():
            t = ev.truth(expr, scope)
            out[name] = ALWAYS if t is True else NEVER if t is False else CONDITIONAL
        return out

    def predicates(self) -> list[Predicate]:
        out = []
        for name, defs in sorted(self.index.defs.items()):
            for d in defs:
                if not self.def_is_arch(d):
                    continue
                verdicts = {}
                for arch, ev in self.evaluators.items():
                    value = ev.definition(d, 0)
                    if isinstance(value, (Func, Partial)):
                        func = value.func if isinstance(value, Partial) else value
                        bound = {k for k, _ in value.kwargs} if isinstance(value, Partial) else set()
                        required = [p for p in _required_params(func.node, func.cls) if p not in bound]
                        if isinstance(value, Partial):
                            required = required[len(value.args):]
                        value = ev.call_value(value, [], {}, Scope(d.file, d.cls, {})) if not required else UNKNOWN
                    t = truth(value)
                    verdicts[arch] = ALWAYS if t is True else NEVER if t is False else CONDITIONAL
                if any(v != CONDITIONAL for v in verdicts.values()):
                    out.append(Predicate(name, d.file, d.line, verdicts))
        return out

    # -- gates ------------------------------------------------------------------------------
    def arch_aliases(self) -> list[str]:
        """Platform attribute names that read the arch (``is_sm100``, ``device_capability``)."""
        out = []
        for attr, target in self.index.aliases().items():
            d = self.index.resolve(target, "")
            if target in CAPABILITY_CALLS or (d is not None and self.def_is_arch(d)):
                out.append(attr)
        return out

def _required_params(node, cls) -> list[str]:
    if isinstance(node, ast.Lambda):
        args = node.args
    else:
        args = node.args
    params = [a.arg for a in args.posonlyargs + args.args]
    if cls is not None and params:
        params = params[1:]
    return params[: len(params) - len(args.defaults)]


def _callee_name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


