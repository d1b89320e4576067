"""What an arch condition evaluates to on each arch of the registry, read from the source.

A small abstract interpreter over ``ast`` expressions: the device is a registry arch (its
compute capability), everything else is *unknown*. Values are Python constants, the
capability (``torch.cuda.get_device_capability()`` and the tree's own helpers built on it:
``get_device_sm()``, ``get_platform().device_capability``, ...), functions and partials
defined in the tree, or :data:`UNKNOWN`. Truth is three-valued (Kleene): for one arch a
condition is ``True`` (always), ``False`` (never) or ``UNKNOWN`` (depends on other settings).

Facts assumed, as a forgepatch image provides them: the platform is CUDA (``is_cuda()`` true,
``is_hip()``/``is_npu()``/... false) and the CUDA toolkit is new enough for the arch (any
comparison with ``torch.version.cuda`` or a ``cuda_version`` holds).
"""

from __future__ import annotations

import ast
import itertools
import operator
from dataclasses import dataclass, field
from typing import Any


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


class _Version:
    """A CUDA toolkit version: every comparison with it holds (assumed new enough)."""


VERSION: Any = _Version()

PLATFORM_TRUE = {"is_cuda", "_is_cuda", "is_cuda_alike", "_is_cuda_alike", "is_nvidia", "_is_nvidia", "is_available"}
PLATFORM_FALSE = {
    "is_hip", "_is_hip", "is_npu", "_is_npu", "is_xpu", "_is_xpu", "is_musa", "_is_musa", "is_mps", "_is_mps",
    "is_cpu", "_is_cpu", "is_hpu", "_is_hpu", "is_rocm", "_is_rocm", "is_mlx", "_is_mlx",
}
CAPABILITY_CALLS = {"get_device_capability": "cap", "get_device_properties": "cap", "get_device_sm": "sm",
                    "nvmlDeviceGetCudaComputeCapability": "cap"}
VERSION_NAMES = {"cuda_version", "CUDA_VERSION", "get_cuda_version", "_get_cuda_version", "get_nvcc_cuda_version"}
MAX_DEPTH = 12


@dataclass(frozen=True)
class Cap:
    """A compute capability: ``(major, minor)``, ``.major``/``.minor``, ``[0]``/``[1]``."""

    major: int
    minor: int

    def tuple(self) -> tuple[int, int]:
        return (self.major, self.minor)


@dataclass(frozen=True)
class Func:
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    file: str
    cls: str | None = None


@dataclass(frozen=True)
class Partial:
    func: Func
    kwargs: tuple[tuple[str, Any], ...]


def kleene_and(a, b):
    if a is False or b is False:
        return False
    if a is True and b is True:
        return True
    return UNKNOWN


def kleene_or(a, b):
    if a is True or b is True:
        return True
    if a is False and b is False:
        return False
    return UNKNOWN


def truth(value) -> Any:
    """True / False / UNKNOWN of a value."""
    if value is UNKNOWN or isinstance(value, (Func, Partial)):
        return UNKNOWN if value is UNKNOWN else True
    if value is VERSION:
        return True
    if isinstance(value, Cap):
        return True
    try:
        return bool(value)
    except Exception:
        return UNKNOWN


_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
        ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.Div: operator.truediv}


def _plain(value):
    """A Cap compares as its tuple."""
    return value.tuple() if isinstance(value, Cap) else value


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

    def __init__(self, index, cc: tuple[int, int], policy=None):
        """``policy`` says which definitions are followed (those built on arch reads, and
        literal tables); others are UNKNOWN: a module flag ``X = False`` or a
        ``self.x = False`` somewhere in a class says nothing about the value at a gate."""
        self.index, self.cc, self.policy = index, cc, policy
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
            return UNKNOWN
        return self.definition(definition, scope.depth)

    def _follows(self, definition) -> bool:
        if self.policy is None or _literal_table(definition.node):
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
        return UNKNOWN if any(i is UNKNOWN for i in items) else tuple(_plain(i) for i in items)

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
            elif left is UNKNOWN or right is UNKNOWN or type(op) not in _CMP:
                step = UNKNOWN
            else:
                try:
                    step = bool(_CMP[type(op)](_plain(left), _plain(right)))
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
        if isinstance(left, (int, float)) and isinstance(right, (int, float)) and type(expr.op) in _BIN:
            try:
                return _BIN[type(expr.op)](left, right)
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
            return UNKNOWN if definition is None or not self._follows(definition) else self.definition(definition, scope.depth)
        # platform facts are properties: reading one calls the probe
        return self.call_value(target, [], {}, scope) if isinstance(target, (Func, Partial)) else target

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
            return Func(method, scope.file, scope.cls) if method is not None else UNKNOWN
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
                kwargs = tuple((k.arg, self.value(k.value, scope)) for k in expr.keywords if k.arg)
                return Partial(target, kwargs)
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
        if isinstance(callee, (Func, Partial)):
            args = [self.value(a, scope) for a in expr.args]
            kwargs = {k.arg: self.value(k.value, scope) for k in expr.keywords if k.arg}
            return self.call_value(callee, args, kwargs, scope)
        return UNKNOWN

    def call_value(self, callee, args: list, kwargs: dict, scope: Scope) -> Any:
        if isinstance(callee, Partial):
            merged = dict(callee.kwargs)
            merged.update(kwargs)
            return self.call_value(callee.func, args, merged, scope)
        node = callee.node
        key = ("call", callee.file, id(node), repr(args), repr(sorted(kwargs.items(), key=lambda kv: kv[0])))
        if key in self._memo:
            return self._memo[key]
        if key in self._active or scope.depth > MAX_DEPTH:
            return UNKNOWN
        self._active.add(key)
        try:
            local = _bind(node.args, args, kwargs, callee.cls is not None and not isinstance(node, ast.Lambda))
            inner = Scope(callee.file, callee.cls, local, scope.depth + 1)
            if isinstance(node, ast.Lambda):
                result = self.value(node.body, inner)
            else:
                inner.local.update({k: v for k, v in assignments(node).items() if k not in local})  # params win
                result = self._run(node.body, inner)
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


def _literal_table(node) -> bool:
    """A literal tuple/list/set/dict of constants (``_PINNED = {(9, 0): ...}``), not a flag."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_literal_table(e) or isinstance(e, ast.Constant) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and (_literal_table(k) or isinstance(k, ast.Constant)) for k in node.keys)
    return False


_DECORATOR: Any = object()
_FALLTHROUGH: Any = type("_Fallthrough", (), {"__repr__": lambda self: "FALLTHROUGH"})()


def _bind(arguments: ast.arguments, args: list, kwargs: dict, method: bool) -> dict[str, Any]:
    params = [a.arg for a in arguments.posonlyargs + arguments.args]
    if method and params:
        params = params[1:]
    bound: dict[str, Any] = {p: UNKNOWN for p in params}
    bound.update({a.arg: UNKNOWN for a in arguments.kwonlyargs})
    defaults = arguments.defaults
    for name, default in zip(params[len(params) - len(defaults):], defaults):
        bound[name] = default
    for name, default in zip([a.arg for a in arguments.kwonlyargs], arguments.kw_defaults):
        if default is not None:
            bound[name] = default
    for name, value in zip(params, args):
        bound[name] = value
    for name, value in kwargs.items():
        if name in bound:
            bound[name] = value
    return bound


def assignments(func: ast.AST) -> dict[str, Any]:
    """Flow-insensitive local bindings of a function body: ``name = expr`` and
    ``a, b = expr`` (as ("unpack", expr, i)); a name bound more than once is UNKNOWN (which
    binding reaches a use is not followed). Nested functions and classes are not entered."""
    out: dict[str, Any] = {}

    def bind(name: str, value: Any) -> None:
        out[name] = UNKNOWN if name in out else value

    for node in statements(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                bind(target.id, node.value)
            elif isinstance(target, (ast.Tuple, ast.List)):
                for i, elt in enumerate(target.elts):
                    if isinstance(elt, ast.Name):
                        bind(elt.id, ("unpack", node.value, i))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            bind(node.target.id, node.value)
        elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor)) and isinstance(getattr(node, "target", None), ast.Name):
            bind(node.target.id, UNKNOWN)
    return out


def statements(func: ast.AST):
    """Every statement in a function body, nested blocks included, nested functions and
    classes not entered (cheaper than ast.walk: expressions are not visited)."""
    stack = list(reversed(getattr(func, "body", None) or getattr(func, "nodes", [])))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield node
        children = []
        for field_name in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, field_name, ()) or ():
                if isinstance(child, (ast.excepthandler, ast.match_case)):
                    children.extend(child.body)
                elif isinstance(child, ast.stmt):
                    children.append(child)
        stack.extend(reversed(children))


class Locals(dict):
    """A function's bindings, computed the first time a name is looked up."""

    def __init__(self, func: ast.AST):
        super().__init__()
        self._func: ast.AST | None = func

    def _load(self) -> None:
        if self._func is not None:
            func, self._func = self._func, None
            self.update(assignments(func))

    def __contains__(self, name) -> bool:
        self._load()
        return super().__contains__(name)

    def __getitem__(self, name):
        self._load()
        return super().__getitem__(name)

    def items(self):
        self._load()
        return super().items()
