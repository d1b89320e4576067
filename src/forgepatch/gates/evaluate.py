"""What an arch condition evaluates to on each arch of the registry, read from the source.

A small abstract interpreter over ``ast`` expressions: the device is a registry arch (its
compute capability), everything else is *unknown*. Values are Python constants, the
capability (``torch.cuda.get_device_capability()`` and the tree's own helpers built on it:
``get_device_sm()``, ``get_platform().device_capability``, ...), functions and partials
defined in the tree, or :data:`UNKNOWN`. Truth is three-valued (Kleene): for one arch a
condition is ``True`` (always), ``False`` (never) or ``UNKNOWN`` (depends on other settings).

The values and the assumptions (a CUDA platform, a toolkit new enough) are in
:mod:`forgepatch.gates.values`; local bindings in :mod:`forgepatch.gates.bindings`.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from typing import Any

from forgepatch.gates.bindings import assignments, bind_call
from forgepatch.gates.values import (
    BIN, CAPABILITY_CALLS, CMP, PLATFORM_FALSE, PLATFORM_TRUE, UNKNOWN, VERSION, VERSION_NAMES, Cap, Func, Partial,
    family_value, kleene_and, kleene_or, literal_table, plain, truth,
)

MAX_DEPTH = 12  # definitions followed through at most this many levels
_SERIAL = itertools.count()


@dataclass
class Scope:
    file: str
    cls: str | None
    local: dict[str, Any]  # name -> ast.expr (lazy) or ("unpack", expr, index) or a value
    depth: int = 0
    key: int = field(default_factory=lambda: next(_SERIAL))  # memo key (ids of dicts get reused)

    def deeper(self) -> "Scope":
        """The same bindings one level deeper (same memo key)."""
        return Scope(self.file, self.cls, self.local, self.depth + 1, self.key)


class Evaluator:
    """Evaluates expressions for one compute capability against an :class:`~forgepatch.gates.index.Index`."""

    def __init__(self, index, cc: tuple[int, int], policy=None, strict: bool = False, reads_arch=None):
        """``policy`` says which definitions are followed (those built on arch reads, and
        literal tables); others are UNKNOWN: a module flag ``X = False`` or a
        ``self.x = False`` somewhere in a class says nothing about the value at a gate.

        ``strict`` (the apply verifier): a function whose decorator is not a known
        transparent one (caches, ``property``) is UNKNOWN, a stub body (``...``) is UNKNOWN
        rather than None, a property read through ``self`` is called, a lambda is a
        function, and an SGLang family predicate (``is_sm100_supported``, ``_is_sm100``,
        ``.is_sm100``) the tree does not define readably is read by its name
        (:func:`~forgepatch.gates.values.family_value`).

        ``reads_arch`` (strict mode: does a definition read the arch?): a family-named name
        the tree defines WITHOUT reading the arch (``_is_sm120_supported =
        bool(os.environ[...])``), whose value cannot be decided, is UNKNOWN: its name says
        nothing about what it tests."""
        self.index, self.cc, self.policy, self.strict = index, cc, policy, strict
        self.reads_arch = reads_arch
        self._memo: dict[tuple, Any] = {}
        self._active: set[tuple] = set()

    # -- names ------------------------------------------------------------------------
    def name(self, name: str, scope: Scope) -> Any:
        if name in scope.local:
            return self._local(name, scope)
        if name in PLATFORM_TRUE:
            return True
        if name in PLATFORM_FALSE:
            return False
        if name in VERSION_NAMES:
            return VERSION
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        definition = self.index.resolve(name, scope.file)
        if definition is None or not self._follows(definition):
            return self._by_name(self.index.original_name(name, scope.file) if self.strict else name)
        value = self.definition(definition, scope.depth)
        if value is UNKNOWN and self.strict:
            majors = capability_majors(definition.node)
            if majors is not None:  # `is_blackwell = lru_cache(...)(partial(_check..., device_capability_majors=[10, 11, 12]))`
                return _NamedPredicate(definition.name, self.cc[0] in majors)
        if value is UNKNOWN:
            if self.strict and self.reads_arch is not None and not self.reads_arch(definition):
                return UNKNOWN  # defined here without an arch read: not the family's predicate
            return self._by_name(definition.name)
        return value

    def _by_name(self, name: str) -> Any:
        """Strict mode: an undefined or unreadable family predicate, read by its name."""
        if not self.strict:
            return UNKNOWN
        fam = family_value(name, self.cc)
        if fam is UNKNOWN:
            return UNKNOWN
        return fam if not name.endswith("_supported") or name.startswith("_") else _NamedPredicate(name, fam)

    def _follows(self, definition) -> bool:
        if self.policy is None or literal_table(definition.node):
            return True
        return self.policy.follows(definition)

    def _local(self, name: str, scope: Scope) -> Any:
        key = ("local", scope.key, name)
        if key in self._memo:
            return self._memo[key]
        if key in self._active:
            return UNKNOWN  # x = f(x)
        bound = scope.local[name]
        self._active.add(key)
        try:
            if isinstance(bound, tuple) and bound and bound[0] == "unpack":
                _, expr, index = bound
                whole = self.value(expr, scope.deeper())
                if isinstance(whole, Cap):
                    result = (whole.major, whole.minor)[index] if index < 2 else UNKNOWN
                elif isinstance(whole, (tuple, list)) and index < len(whole):
                    result = whole[index]
                else:
                    result = UNKNOWN
            elif isinstance(bound, ast.AST):
                result = self.value(bound, scope.deeper())
            else:
                result = bound
        finally:
            self._active.discard(key)
        self._memo[key] = result
        return result

    def definition(self, definition, depth: int) -> Any:
        """The value a module-level definition names (a Func for a def, else its value)."""
        key = ("def", definition.file, definition.name, definition.line)
        if key in self._memo:
            return self._memo[key]
        if isinstance(definition.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if self.strict and not transparent(definition.node):
                result = UNKNOWN
            else:
                result = Func(definition.node, definition.file, definition.cls)
        elif key in self._active or depth > MAX_DEPTH:
            return UNKNOWN
        else:
            self._active.add(key)
            try:
                result = self.value(definition.node, Scope(definition.file, definition.cls, {}, depth + 1))
            finally:
                self._active.discard(key)
        self._memo[key] = result
        return result

    # -- expressions ----------------------------------------------------------------------
    def truth(self, expr: ast.expr, scope: Scope) -> Any:
        if isinstance(expr, ast.BoolOp):
            result = self.truth(expr.values[0], scope)
            for operand in expr.values[1:]:
                if isinstance(expr.op, ast.And):
                    if result is False:
                        return False
                    result = kleene_and(result, self.truth(operand, scope))
                else:
                    if result is True:
                        return True
                    result = kleene_or(result, self.truth(operand, scope))
            return result
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            inner = self.truth(expr.operand, scope)
            return UNKNOWN if inner is UNKNOWN else not inner
        return truth(self.value(expr, scope))

    def value(self, expr: ast.expr, scope: Scope) -> Any:
        if scope.depth > MAX_DEPTH:
            return UNKNOWN
        try:
            method = getattr(self, "_" + type(expr).__name__, None)
            return method(expr, scope) if method else UNKNOWN
        except RecursionError:
            return UNKNOWN

    def _Constant(self, expr, scope):
        return expr.value

    def _Lambda(self, expr, scope):
        return Func(expr, scope.file, None) if self.strict else UNKNOWN

    def _Name(self, expr, scope):
        return self.name(expr.id, scope)

    def _BoolOp(self, expr, scope):
        return self.truth(expr, scope)

    def _UnaryOp(self, expr, scope):
        if isinstance(expr.op, ast.Not):
            return self.truth(expr, scope)
        operand = self.value(expr.operand, scope)
        if isinstance(expr.op, ast.USub) and isinstance(operand, (int, float)):
            return -operand
        return UNKNOWN

    def _Tuple(self, expr, scope):
        items = [self.value(e, scope) for e in expr.elts]
        return UNKNOWN if any(i is UNKNOWN for i in items) else tuple(plain(i) for i in items)

    _List = _Tuple

    def _Set(self, expr, scope):
        items = self._Tuple(expr, scope)
        try:
            return UNKNOWN if items is UNKNOWN else frozenset(items)
        except TypeError:
            return UNKNOWN

    def _IfExp(self, expr, scope):
        test = self.truth(expr.test, scope)
        if test is UNKNOWN:
            body, other = self.value(expr.body, scope), self.value(expr.orelse, scope)
            return body if body == other and body is not UNKNOWN else UNKNOWN
        return self.value(expr.body if test else expr.orelse, scope)

    def _Compare(self, expr, scope):
        left = self.value(expr.left, scope)
        result: Any = True
        for op, right_node in zip(expr.ops, expr.comparators):
            right = self.value(right_node, scope)
            if left is VERSION or right is VERSION:
                step: Any = True
            elif left is UNKNOWN or right is UNKNOWN or type(op) not in CMP:
                step = UNKNOWN
            else:
                try:
                    step = bool(CMP[type(op)](plain(left), plain(right)))
                except TypeError:
                    step = UNKNOWN
            result = kleene_and(result, step)
            if result is False:
                return False
            left = right
        return result

    def _BinOp(self, expr, scope):
        left, right = self.value(expr.left, scope), self.value(expr.right, scope)
        if VERSION in (left, right):
            return VERSION
        if isinstance(left, (int, float)) and isinstance(right, (int, float)) and type(expr.op) in BIN:
            try:
                return BIN[type(expr.op)](left, right)
            except ZeroDivisionError:
                return UNKNOWN
        return UNKNOWN

    def _Subscript(self, expr, scope):
        base = self.value(expr.value, scope)
        index = self.value(expr.slice, scope)
        if base is VERSION:
            return VERSION
        if isinstance(base, Cap) and index in (0, 1):
            return base.major if index == 0 else base.minor
        if isinstance(base, (tuple, list)) and isinstance(index, int) and -len(base) <= index < len(base):
            return base[index]
        return UNKNOWN

    def _Attribute(self, expr, scope):
        attr = expr.attr
        if attr in ("cuda",) and isinstance(expr.value, ast.Attribute) and expr.value.attr == "version":
            return VERSION  # torch.version.cuda
        if attr in ("hip", "musa") and isinstance(expr.value, ast.Attribute) and expr.value.attr == "version":
            return None  # torch.version.hip on a CUDA build
        if isinstance(expr.value, ast.Name) and expr.value.id in ("self", "cls") and scope.cls:
            return self._self_attribute(attr, scope)
        base = self.value(expr.value, scope)
        if isinstance(base, Cap) and attr in ("major", "minor"):
            return getattr(base, attr)
        if base is VERSION:
            return VERSION
        if attr in PLATFORM_TRUE:  # get_platform().is_cuda (a property)
            return True
        if attr in PLATFORM_FALSE:
            return False
        target = self._attribute_target(attr, scope)
        if target is UNKNOWN and isinstance(expr.value, ast.Name):  # module.NAME
            definition = self.index.resolve(attr, scope.file)
            value = UNKNOWN if definition is None or not self._follows(definition) else self.definition(definition, scope.depth)
            if value is UNKNOWN and self.strict:
                return family_value(attr, self.cc) if not attr.endswith("_supported") else self._by_name(attr)
            return value
        # platform facts are properties: reading one calls the probe
        value = self.call_value(target, [], {}, scope) if isinstance(target, (Func, Partial)) else target
        if value is UNKNOWN and self.strict and not attr.endswith("_supported"):
            return family_value(attr, self.cc)  # get_platform().is_sm100
        return value

    def _attribute_target(self, attr: str, scope: Scope) -> Any:
        """What ``<platform>.attr`` names: a capability, a probe function, or UNKNOWN."""
        alias = self.index.attribute_alias(attr)
        if alias is None:
            method = self.index.platform_method(attr)
            return Func(method[1], method[0], method[2]) if method else UNKNOWN
        if alias in CAPABILITY_CALLS:
            return self._capability(CAPABILITY_CALLS[alias])
        return self.name(alias, scope)

    def _self_attribute(self, attr: str, scope: Scope) -> Any:
        if self.policy is not None and not self.policy.follows_member(scope.file, scope.cls, attr):
            return UNKNOWN
        exprs = self.index.self_assignments(scope.file, scope.cls, attr)
        if not exprs:
            method = self.index.method(scope.file, scope.cls, attr)
            if method is None:
                return UNKNOWN
            if self.strict:
                if not transparent(method):
                    return UNKNOWN
                if is_property(method):  # reading a property calls it
                    return self.call_value(Func(method, scope.file, scope.cls), [], {}, scope)
            return Func(method, scope.file, scope.cls)
        values = {repr(self.value(e, Scope(scope.file, scope.cls, {}, scope.depth + 1))) for e in exprs}
        if len(values) == 1:
            return self.value(exprs[0], Scope(scope.file, scope.cls, {}, scope.depth + 1))
        return UNKNOWN

    def _capability(self, kind: str) -> Any:
        return Cap(*self.cc) if kind == "cap" else self.cc[0] * 10 + self.cc[1]

    def _Call(self, expr, scope):
        func = expr.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name in CAPABILITY_CALLS:
            return self._capability(CAPABILITY_CALLS[name])
        if name in PLATFORM_TRUE:
            return True
        if name in PLATFORM_FALSE:
            return False
        if name in VERSION_NAMES:
            return VERSION
        if name in ("tuple", "list") and expr.args:
            inner = self.value(expr.args[0], scope)
            return VERSION if inner is VERSION else (tuple(inner) if isinstance(inner, (tuple, list)) else UNKNOWN)
        if name in ("map", "int", "str", "float") and expr.args:
            values = [self.value(a, scope) for a in expr.args]
            return VERSION if VERSION in values else UNKNOWN
        if name == "bool" and expr.args:
            return self.truth(expr.args[0], scope)
        if name == "partial" and expr.args:
            target = self.value(expr.args[0], scope)
            if isinstance(target, Func):
                if any(isinstance(a, ast.Starred) for a in expr.args[1:]) or any(not k.arg for k in expr.keywords):
                    return UNKNOWN
                kwargs = tuple((k.arg, self.value(k.value, scope)) for k in expr.keywords)
                return Partial(target, kwargs, tuple(self.value(a, scope) for a in expr.args[1:]))
            return UNKNOWN
        if name in ("lru_cache", "cache", "cached") and not expr.args:
            return _DECORATOR  # lru_cache(maxsize=1) -> applied to what follows
        if isinstance(func, ast.Call):  # lru_cache(maxsize=1)(partial(...))
            outer = self.value(func, scope)
            if outer is _DECORATOR and expr.args:
                return self.value(expr.args[0], scope)
        if name in ("cache", "lru_cache") and expr.args:
            return self.value(expr.args[0], scope)
        if isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name) and func.value.id in ("self", "cls")):
            callee = self._attribute_target(func.attr, scope)
            if callee is UNKNOWN:
                callee = self.value(func, scope)
        else:
            callee = self.value(func, scope)
        if callee is VERSION:  # torch.version.cuda.split(".")
            return VERSION
        if isinstance(callee, _NamedPredicate):
            return callee.value
        if self.strict and callee is UNKNOWN and name is not None and name.endswith("_supported"):
            return family_value(name, self.cc) if isinstance(func, ast.Attribute) else UNKNOWN
        if isinstance(callee, (Func, Partial)):
            args = [self.value(a, scope) for a in expr.args]
            kwargs = {k.arg: self.value(k.value, scope) for k in expr.keywords if k.arg}
            return self.call_value(callee, args, kwargs, scope)
        return UNKNOWN

    def call_value(self, callee, args: list, kwargs: dict, scope: Scope) -> Any:
        if isinstance(callee, Partial):
            merged = dict(callee.kwargs)
            merged.update(kwargs)
            return self.call_value(callee.func, [*callee.args, *args], merged, scope)
        node = callee.node
        key = ("call", callee.file, id(node), repr(args), repr(sorted(kwargs.items(), key=lambda kv: kv[0])))
        if key in self._memo:
            return self._memo[key]
        if key in self._active or scope.depth > MAX_DEPTH:
            return UNKNOWN
        self._active.add(key)
        try:
            local = bind_call(node.args, args, kwargs, callee.cls is not None and not isinstance(node, ast.Lambda))
            inner = Scope(callee.file, callee.cls, local, scope.depth + 1)
            if isinstance(node, ast.Lambda):
                result = self.value(node.body, inner)
            elif self.strict and is_stub(node):
                result = family_value(node.name, self.cc)  # `def is_sm100_supported(): ...`
            else:
                inner.local.update({k: v for k, v in assignments(node).items() if k not in local})  # params win
                result = self._run(node.body, inner)
                if self.strict and result is _FALLTHROUGH:
                    result = None  # falling off the end returns None
        finally:
            self._active.discard(key)
        self._memo[key] = result
        return result

    def _run(self, body: list[ast.stmt], scope: Scope) -> Any:
        """The return value of a function body: ``if``/``return``/assignments followed, a
        branch on an unknown condition answered only when both branches agree."""
        for stmt in body:
            if isinstance(stmt, ast.Return):
                return None if stmt.value is None else self.value(stmt.value, scope)
            if isinstance(stmt, ast.If):
                test = self.truth(stmt.test, scope)
                if test is UNKNOWN:
                    a, b = self._run(stmt.body, scope), self._run(stmt.orelse, scope)
                    if a is _FALLTHROUGH or b is _FALLTHROUGH or repr(a) != repr(b):
                        return UNKNOWN
                    return a
                branch = self._run(stmt.body if test else stmt.orelse, scope)
                if branch is not _FALLTHROUGH:
                    return branch
                continue
            if isinstance(stmt, ast.Try):
                return self._run(stmt.body, scope)
            if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign, ast.Pass, ast.Import, ast.ImportFrom, ast.Global)):
                continue
            return UNKNOWN  # loops, with, raise ...: not followed
        return _FALLTHROUGH


def capability_majors(node) -> tuple[int, ...] | None:
    """The majors a predicate of SGLang's capability-check form admits, read off its
    definition: a ``partial(<check>, device_capability_majors=[...], ...)`` (possibly under
    ``lru_cache(...)(...)``) whose list is int literals. None for any other form."""
    value = getattr(node, "value", node)
    for sub in ast.walk(value) if isinstance(value, ast.AST) else ():
        if isinstance(sub, ast.Call) and getattr(sub.func, "id", getattr(sub.func, "attr", None)) == "partial":
            for kw in sub.keywords:
                if kw.arg == "device_capability_majors" and isinstance(kw.value, (ast.List, ast.Tuple)):
                    items = kw.value.elts
                    if items and all(isinstance(e, ast.Constant) and type(e.value) is int for e in items):
                        return tuple(e.value for e in items)
    return None


class _NamedPredicate:
    """An SGLang family predicate function read by its name (strict mode): calling it gives
    ``value``; as a bare name it is a function (truthy)."""

    def __init__(self, name: str, value: bool):
        self.name, self.value = name, value

    def __repr__(self) -> str:
        return f"<{self.name}>"


_TRANSPARENT = {"lru_cache", "cache", "cached", "property", "cached_property", "staticmethod", "classmethod",
                "wraps", "functools.lru_cache", "functools.cache", "functools.cached_property", "torch.compile",
                "override", "abstractmethod"}


def _decorator_name(dec: ast.expr) -> str:
    node = dec.func if isinstance(dec, ast.Call) else dec
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def transparent(func) -> bool:
    """Does every decorator of ``func`` leave its value as the body computes it?"""
    return all(_decorator_name(d) in _TRANSPARENT for d in getattr(func, "decorator_list", ()))


def is_property(func) -> bool:
    return any(_decorator_name(d) in ("property", "cached_property") for d in getattr(func, "decorator_list", ()))


def is_stub(func) -> bool:
    """A body of only a docstring, ``...`` or ``pass`` (a declaration, not a definition)."""
    for stmt in func.body:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and (
                stmt.value.value is Ellipsis or isinstance(stmt.value.value, str)):
            continue
        return False
    return True


_DECORATOR: Any = object()
_FALLTHROUGH: Any = type("_Fallthrough", (), {"__repr__": lambda self: "FALLTHROUGH"})()
