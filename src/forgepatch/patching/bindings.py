"""What a top-level name of a module is bound to, read off the module's ``ast`` (not its
spelling), so the codemod calls a function, uses a flag as a flag, and refuses the rest.

The top level is the module body and the bodies of module-level ``if``/``try``/``with``/
``for``/``while`` blocks (not functions or classes). Each binding of the name there is
classified; a name bound more than once is its one kind when every binding agrees, and
UNKNOWN otherwise (``if ...: def x(): ... else: x = False``).

Kinds:

- FUNCTION: ``def``/``async def`` whose decorators keep it a plain callable (``lru_cache``,
  ``cache``, ``wraps(...)``), ``lambda``, ``partial(...)``, a callable-keeping decorator
  applied by hand (``lru_cache(maxsize=1)(partial(...))``, as ``sglang.srt.utils`` spells its
  predicates), an alias of one of these. ``predicate`` says the function is known to return
  a flag (annotated ``-> bool``, or every ``return`` is a flag).
- BOOL: ``True``/``False``, a comparison, ``and``/``or``, ``not``, a platform fact
  (``get_platform().is_sm100``), the stored result of a known predicate, an alias of a flag.
- CLASS, VALUE (a literal that is neither a flag nor callable: a number, a string, ``None``,
  a container).
- IMPORT: ``from MODULE import ORIG [as name]`` or an alias of such a name; ``detail`` is
  ``MODULE:ORIG`` as written (leading dots for a relative import). :func:`resolved` follows it
  through the tree.
- CALL: the stored result of an imported callable (``x = is_sm120_supported()``); a flag when
  :func:`resolved` finds the callee to be a predicate, else UNKNOWN.
- UNKNOWN: anything else (an attribute of an object, the result of a call of unknown kind, a
  ``@property`` at module level, a tuple unpacking, ``x += ...``), with why.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import NamedTuple

from forgepatch.patching.resolve import ReadText, absolute_module, find_definition

FUNCTION, BOOL, CLASS, VALUE, IMPORT, CALL, UNKNOWN = "function", "bool", "class", "value", "import", "call", "unknown"

# decorators (and decorator factories applied by hand) that leave a function a plain callable
_KEEPS_CALLABLE = {"lru_cache", "cache", "wraps", "functools.lru_cache", "functools.cache", "functools.wraps"}
_PARTIAL = {"partial", "functools.partial"}
_DEPTH = 8  # aliases followed within a module


class Binding(NamedTuple):
    """How a module binds a name: ``kind`` (above), ``detail`` (IMPORT/CALL: ``MODULE:ORIG``;
    UNKNOWN: why; else the binding's source), ``line`` (the first binding's line; for UNKNOWN
    the binding that makes it so), ``predicate`` (FUNCTION: returns a flag)."""

    kind: str
    detail: str
    line: int
    predicate: bool = False


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _top_level(body: list[ast.stmt]):
    """The module's statements, with those of module-level blocks (not functions/classes)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While)):
            yield from _top_level(stmt.body)
            yield from _top_level(stmt.orelse)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            yield from _top_level(stmt.body)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            yield from _top_level(stmt.body)
            for handler in stmt.handlers:
                yield from _top_level(handler.body)
            yield from _top_level(stmt.orelse)
            yield from _top_level(stmt.finalbody)


def _targets(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, (ast.Tuple, ast.List)):
        return [t for elt in node.elts for t in _targets(elt)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return [node]


class _Module:
    """One module's top-level bindings, by name (statements in source order)."""

    def __init__(self, tree: ast.Module) -> None:
        self.bound: dict[str, list[tuple[ast.stmt, ast.AST | None]]] = {}
        for stmt in _top_level(tree.body):
            for name, value in self._binds(stmt):
                self.bound.setdefault(name, []).append((stmt, value))

    @staticmethod
    def _binds(stmt: ast.stmt):
        """(name, what it is bound to) for each name ``stmt`` binds; the value is None where
        the statement itself is the binding (def, class, import) or it cannot be read."""
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield stmt.name, None
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                for t in _targets(target):
                    if isinstance(t, ast.Name):
                        yield t.id, (stmt.value if t is target else None)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None and isinstance(stmt.target, ast.Name):
            yield stmt.target.id, stmt.value
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            yield stmt.target.id, None
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if alias.name != "*":
                    yield alias.asname or alias.name, None
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                yield alias.asname or alias.name.split(".")[0], None
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            for t in _targets(stmt.target):
                if isinstance(t, ast.Name):
                    yield t.id, None
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                for t in _targets(item.optional_vars) if item.optional_vars is not None else ():
                    if isinstance(t, ast.Name):
                        yield t.id, None

    # -- one name ---------------------------------------------------------------------
    def each(self, name: str, seen: frozenset = frozenset()) -> list[Binding]:
        """Every top-level binding of ``name``, classified, in source order."""
        found = self.bound.get(name, [])
        if found and (name in seen or len(seen) > _DEPTH):
            return [Binding(UNKNOWN, f"{name} is bound through a cycle of aliases", found[0][0].lineno)]
        return [self._statement(name, stmt, value, seen | {name}) for stmt, value in found]

    def kind(self, name: str, seen: frozenset = frozenset()) -> Binding | None:
        return merge(name, self.each(name, seen))

    def _statement(self, name: str, stmt: ast.stmt, value: ast.AST | None, seen: frozenset) -> Binding:
        line = stmt.lineno
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            odd = [_dotted(d.func if isinstance(d, ast.Call) else d) for d in stmt.decorator_list]
            odd = [d for d in odd if d not in _KEEPS_CALLABLE]
            if odd:
                return Binding(UNKNOWN, f"{name} is a def decorated with @{odd[0] or '...'}", line)
            return Binding(FUNCTION, f"def {name}", line, self._returns_flag(stmt, seen))
        if isinstance(stmt, ast.ClassDef):
            return Binding(CLASS, f"class {name}", line)
        if isinstance(stmt, ast.ImportFrom):
            orig = next(a.name for a in stmt.names if (a.asname or a.name) == name)
            return Binding(IMPORT, f"{'.' * stmt.level}{stmt.module or ''}:{orig}", line)
        if isinstance(stmt, ast.Import):
            return Binding(UNKNOWN, f"{name} is a module", line)
        if value is None:
            return Binding(UNKNOWN, f"{name} is bound by `{ast.unparse(stmt).splitlines()[0]}`", line)
        return self.expression(value, seen, line, name)

    def _returns_flag(self, func: ast.AST, seen: frozenset) -> bool:
        if isinstance(func, ast.Lambda):
            return self.expression(func.body, seen, 0, "").kind == BOOL
        if func.returns is not None and _dotted(func.returns) == "bool":
            return True
        returns = [n.value for n in ast.walk(func) if isinstance(n, ast.Return)]
        if not returns or any(r is None for r in returns):
            return False
        return all(self.expression(r, seen, 0, "").kind == BOOL for r in returns)

    # -- one expression ---------------------------------------------------------------
    def expression(self, expr: ast.AST, seen: frozenset, line: int, name: str) -> Binding:
        code = ast.unparse(expr)
        if isinstance(expr, ast.Lambda):
            return Binding(FUNCTION, code, line, self._returns_flag(expr, seen))
        if isinstance(expr, ast.Constant):
            return Binding(BOOL if isinstance(expr.value, bool) else VALUE, code, line)
        if isinstance(expr, (ast.Compare, ast.BoolOp)) or (isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not)):
            return Binding(BOOL, code, line)
        if isinstance(expr, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.JoinedStr, ast.ListComp, ast.SetComp,
                             ast.DictComp, ast.GeneratorExp)):
            return Binding(VALUE, code, line)
        if isinstance(expr, ast.Name):
            bound = self.kind(expr.id, seen)
            if bound is None:
                return Binding(UNKNOWN, f"{name} = {code}: {expr.id} is not bound at the module's top level", line)
            return bound._replace(line=line)  # an alias: what it names, at the alias's line
        if isinstance(expr, ast.Attribute):
            if expr.attr.startswith("is_sm") and expr.attr[5:].isdigit():
                return Binding(BOOL, code, line)  # a platform fact (get_platform().is_sm100)
            return Binding(UNKNOWN, f"{name} = {code}: an attribute forgepatch cannot classify", line)
        if isinstance(expr, ast.IfExp):
            a, b = self.expression(expr.body, seen, line, name), self.expression(expr.orelse, seen, line, name)
            if a.kind == b.kind and a.kind not in (UNKNOWN, IMPORT, CALL):
                return a._replace(detail=code, predicate=a.predicate and b.predicate)
            return Binding(UNKNOWN, f"{name} = {code}: its branches are of different kinds", line)
        if isinstance(expr, ast.Call):
            return self._call(expr, seen, line, name, code)
        return Binding(UNKNOWN, f"{name} = {code}: an expression forgepatch cannot classify", line)

    def _call(self, expr: ast.Call, seen: frozenset, line: int, name: str, code: str) -> Binding:
        func = expr.func
        callee = _dotted(func)
        if callee in _PARTIAL and expr.args:
            inner = self.expression(expr.args[0], seen, line, name)
            if inner.kind in (FUNCTION, IMPORT):
                return Binding(FUNCTION, code, line, inner.predicate)
            return Binding(UNKNOWN, f"{name} = {code}: a partial of something not known to be callable", line)
        if callee in ("lru_cache", "cache", "functools.lru_cache", "functools.cache") and expr.args \
                and not expr.keywords and len(expr.args) == 1:  # lru_cache(f)
            return self._decorated(expr.args[0], seen, line, name, code)
        if isinstance(func, ast.Call) and _dotted(func.func) in _KEEPS_CALLABLE and len(expr.args) == 1:
            return self._decorated(expr.args[0], seen, line, name, code)  # lru_cache(maxsize=1)(f)
        called = self.expression(func, seen, line, name) if isinstance(func, ast.Name) else None
        if called is not None and called.kind == FUNCTION:
            if called.predicate:
                return Binding(BOOL, code, line)
            return Binding(UNKNOWN, f"{name} = {code}: {callee} is not known to return a flag", line)
        if called is not None and called.kind == IMPORT:
            return Binding(CALL, called.detail, line)
        return Binding(UNKNOWN, f"{name} = {code}: the result of a call forgepatch cannot classify", line)

    def _decorated(self, inner: ast.expr, seen: frozenset, line: int, name: str, code: str) -> Binding:
        kind = self.expression(inner, seen, line, name)
        if kind.kind in (FUNCTION, IMPORT):
            return Binding(FUNCTION if kind.kind == FUNCTION else IMPORT, code if kind.kind == FUNCTION else kind.detail,
                           line, kind.predicate)
        return Binding(UNKNOWN, f"{name} = {code}: a cache of something not known to be callable", line)


def merge(name: str, kinds: list[Binding]) -> Binding | None:
    """One binding for several: their kind when all agree (an IMPORT or CALL: of the same
    ``MODULE:ORIG``), else UNKNOWN at the first binding that disagrees."""
    if not kinds:
        return None
    bad = next((k for k in kinds if k.kind == UNKNOWN), None)
    if bad is not None:
        return bad

    def key(k: Binding) -> tuple[str, str]:
        return k.kind, (k.detail if k.kind in (IMPORT, CALL) else "")

    first = kinds[0]
    other = next((k for k in kinds if key(k) != key(first)), None)
    if other is not None:
        lines = ", ".join(str(k.line) for k in kinds)
        return Binding(UNKNOWN, f"{name} is bound {len(kinds)} times in different ways (lines {lines})", other.line)
    return first._replace(predicate=all(k.predicate for k in kinds))


@lru_cache(maxsize=64)
def _module(text: str) -> _Module | None:
    try:
        return _Module(ast.parse(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


@lru_cache(maxsize=1024)
def _each(text: str, name: str) -> tuple[Binding, ...]:
    if name not in text:  # most asks (is the new name bound yet?): no parse at all
        return ()
    module = _module(text)
    return tuple(module.each(name)) if module is not None else ()


def binding(text: str, name: str) -> Binding | None:
    """How ``text`` binds ``name`` at its top level (see the module's docstring); None if it
    does not (or the text does not parse: the engine reports that on its own)."""
    return merge(name, list(_each(text, name)))


def resolved(read: ReadText, rel: str, text: str, name: str, _depth: int = 0) -> Binding | None:
    """:func:`binding` with each IMPORT and CALL followed through the modules of this tree
    before the bindings are merged (``try: from a import f`` / ``except: f = lambda: False``
    is one function): an import keeps kind IMPORT only when the tree does not define the
    name; a stored call is BOOL when the callee is a predicate, else UNKNOWN. ``line`` stays
    this file's."""
    return merge(name, [_follow(read, rel, name, b, _depth) for b in _each(text, name)])


def _follow(read: ReadText, rel: str, name: str, bound: Binding, depth: int) -> Binding:
    if bound.kind not in (IMPORT, CALL):
        return bound
    target = _target(read, rel, bound.detail, depth)
    module = bound.detail.rpartition(":")[0]
    if bound.kind == CALL:
        if target is not None and target.kind == FUNCTION and target.predicate:
            return Binding(BOOL, f"the result of {bound.detail}", bound.line)
        return Binding(UNKNOWN, f"{name} stores the result of {bound.detail.replace(':', '.')}, "
                                "not known to return a flag", bound.line)
    if target is None or target.kind == IMPORT:
        return bound
    if target.kind == UNKNOWN:
        return target._replace(line=bound.line)
    return target._replace(line=bound.line, detail=f"{target.detail} (imported from {module})")


def _target(read: ReadText, rel: str, spec: str, depth: int) -> Binding | None:
    """What ``from MODULE import ORIG`` (``spec``, as written in ``rel``) names in this tree."""
    if depth > 4:
        return None
    module, _, orig = spec.rpartition(":")
    level = len(module) - len(module.lstrip("."))
    where = find_definition(read, absolute_module(rel, module.lstrip("."), level), orig)
    text = read(where) if where else None
    if text is None:
        return None
    return resolved(read, where, text, orig, depth + 1)

