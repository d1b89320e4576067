"""Truth by evaluation: every gate of a patch's feature, evaluated under every registry arch,
before and after the patch (the apply verifier).

A *gate* here is any condition or value in a feature function that reads an arch fact: an
``if``/``elif``/``while``/``assert``/conditional-expression/comprehension test, a ``match``
on the capability, a ``return``, an assignment, a call argument or a decorator. *Feature
functions* are found by what the feature is, not only by the site list: functions (nested
ones and methods included) whose code names a marker, the site functions the engine found,
and the functions of the examined files they call. The examined files are those the patch
changed and every file of the tree that names a marker and an arch word (so a new module
with the feature's gate is seen).

Each gate is evaluated by the three-valued evaluator of ``forgepatch gates``
(:mod:`forgepatch.gates.evaluate`, strict mode) under each arch of :data:`~forgepatch.arch.ARCHES`:
its arch reads are decided per arch, the rest of the condition (settings, arguments) is
kept as free atoms, and the gate's value on an arch is its truth table over those atoms.
The promise, per gate:

- ``unverified``: an arch read the evaluator cannot decide on some arch (closed world:
  unknown is never ok; exit 1, nothing written);
- ``wrong``: on an arch outside the patch's target family the gate's value changed;
- ``incomplete``: a gate of the feature (its guarded statement names a marker, or it sits in
  a site function) that, for a widening patch, does not admit the target arch exactly as it
  admits a reference arch (sm120: as sm100 or sm90 do), or whose "absorbed upstream" claim
  (a custom codemod's) the evaluation does not bear out.

The result is a list of :class:`GateCheck` (file, line, qualified name, status, per-arch
value before and after): plain data a lock of edit sets can be built from.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from forgepatch.arch import ARCHES, SIBLING_FAMILIES as SIBLINGS, Arch
from forgepatch.gates.bindings import Locals, assignments, bind_call
from forgepatch.gates.evaluate import Evaluator, Scope, is_property, transparent
from forgepatch.gates.index import Index, absolute_module, module_files
from forgepatch.gates.reads import ArchReads
from forgepatch.gates.scan import Block, SourceFile, parse_file
from forgepatch.gates.values import UNKNOWN, VERSION, Func, Partial, plain
from forgepatch.patching.markers import Matcher

# words that name an arch fact: what the closed world is about
ARCH_WORDS = re.compile(r"\bis_sm\d+\w*|\b_is_sm\d+\w*|get_device_capability|get_device_sm\b|device_capability"
                        r"|is_blackwell\w*|is_hopper\w*|compute_capability|get_cuda_arch")
ARCH_BYTES = (b"is_sm", b"capabilit", b"get_device_sm", b"blackwell", b"hopper", b"get_cuda_arch")
MAX_ATOMS = 6  # free atoms enumerated per gate (2**6 rows); more: three-valued truth only
OK, UNVERIFIED, WRONG, INCOMPLETE = "ok", "unverified", "wrong", "incomplete"


@dataclass(frozen=True)
class GateCheck:
    """One gate of the feature, judged: where, what, and its value on each arch before and
    after the patch (a value is the gate's truth table over its free atoms, as text)."""

    file: str
    line: int  # upstream line (the tree before this patch)
    function: str  # qualified name ("Class.method", "<module>")
    expr: str  # the gate's code (ast.unparse)
    status: str  # ok | unverified | wrong | incomplete
    reason: str
    before: dict[str, str] | None  # arch -> value (None: the gate is new)
    after: dict[str, str] = field(default_factory=dict)
    feature: bool = False  # a gate of the feature proper (held to admitting the arch)
    edited: bool = False  # the patch changed this gate (or its file): no rule may excuse it
    outside_within: bool = False  # a site function's gate outside the branch the site's `within` names

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Root:
    """One gate found in a version of a file."""

    rel: str
    qual: str
    line: int
    node: Any  # ast.expr, or ast.Match
    scope: Scope
    feature: bool
    mode: str  # "truth" | "value" | "match"
    changed: bool = False
    outside_within: bool = False  # in a site function, outside the branch its `within` names


# -- feature functions ---------------------------------------------------------------------
def _functions(tree: ast.Module):
    """(node, qualified name, enclosing class) for every def, nested ones included."""
    out = []

    def walk(body, qual, cls):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = ".".join(qual + [node.name])
                out.append((node, name, cls))
                walk(node.body, qual + [node.name], None)
            elif isinstance(node, ast.ClassDef):
                walk(node.body, qual + [node.name], node.name)
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                walk(getattr(node, "body", []) + getattr(node, "orelse", []) + getattr(node, "finalbody", []), qual, cls)

    walk(tree.body, [], None)
    return out


def _code_names(node: ast.AST, keywords: bool = True) -> set[str]:
    """The names a piece of code reads; ``keywords``: a call's keyword names too (the
    parameter names of another function: a site's own idiom, not a read elsewhere)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif keywords and isinstance(n, ast.keyword) and n.arg:
            out.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(n.name)
    return out


def _strings(node: ast.AST) -> list[str]:
    docs = {id(s.value) for s in ast.walk(node) if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)}
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]


def _names_marker(nodes: Iterable[ast.AST], match: Matcher, lines: list[str] | None = None,
                  keywords: bool = True) -> bool:
    for node in nodes:
        if lines is not None and hasattr(node, "end_lineno"):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
            segment = "".join(lines[first - 1: node.end_lineno])
            if not any(m in segment for m in match.words) and not any(p in segment for p in match._phrases):
                continue  # no marker in its text: none in its code
        if match.words & _code_names(node, keywords) or any(match.string(s) for s in _strings(node)):
            return True
    return False


def _test_module(rel: str) -> bool:
    """A test of the package (shipped in the wheel, imported by no server): its gates gate
    nothing at run time, so a marker found there does not make them the feature's."""
    parts = rel.split("/")
    name = parts[-1]
    return any(p in ("test", "tests") for p in parts[:-1]) or name.startswith("test_") \
        or name.endswith("_test.py") or name == "conftest.py"


def _exits(body: list[ast.stmt]) -> bool:
    """Does a branch leave the function without a value of its own: ``raise``, a bare
    ``return`` or a constant one (None/False/True/0): a gatekeeper, not a dispatch that
    returns what the arch selects (``return "flashinfer"``)."""
    for s in body:
        if isinstance(s, ast.Raise):
            return True
        if isinstance(s, ast.Return):
            v = s.value
            return v is None or (isinstance(v, ast.Constant) and (not isinstance(v.value, str) or v.value == ""))
    return False


def _own_body(func) -> list[ast.stmt]:
    return func.body


# -- gates of a function -------------------------------------------------------------------
_SIMPLE = (ast.Return, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Assert, ast.Raise)


def _roots(func, rel: str, qual: str, cls: str | None, arch_expr: Callable[[ast.AST], bool],
           match: Matcher | None, site: bool, within: tuple[str, ...] = ()) -> list[_Root]:
    """The gates of one function (nested functions are their own)."""
    local = Locals(func)
    for name, nested in _nested_defs(func).items():  # a closure is called as what it is
        if name not in local:
            local[name] = Func(nested, rel, None)
    scope = Scope(rel, cls, local)
    out: list[_Root] = []
    base = arch_expr
    arch_expr = lambda node: base(node, scope)  # noqa: E731 - the function's locals count

    marker_reads: set[str] | None = None

    def feeds_marker(stmt) -> bool:
        """Does an ``if`` assign a local that a statement naming a marker reads?"""
        nonlocal marker_reads
        if match is None:
            return False
        if marker_reads is None:
            marker_reads = set()
            for sub in ast.walk(func):
                if isinstance(sub, _SIMPLE) and _names_marker([sub], match, keywords=kw):
                    marker_reads |= {n.id for n in ast.walk(sub) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assigned = {t.id for part in (stmt.body, stmt.orelse) for s in part for sub in ast.walk(s)
                    if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                    for t in (sub.targets if isinstance(sub, ast.Assign) else [sub.target]) if isinstance(t, ast.Name)}
        return bool(assigned & marker_reads)

    # outside the patch's own sites a gate is the feature's by what it reads, not by the
    # keyword names of a call it makes (`f(tp_size=...)` names another function's parameter)
    kw = site

    parents: dict[int, ast.AST] = {}
    in_body: set[int] = set()  # statements in the body of their parent (not its else)
    for outer in ast.walk(func):
        if isinstance(outer, (ast.If, ast.While, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.Try)):
            for part in ("body", "orelse", "finalbody"):
                for child in getattr(outer, part, ()):
                    parents[id(child)] = outer
                    if part == "body":
                        in_body.add(id(child))
            for handler in getattr(outer, "handlers", ()):
                for child in handler.body:
                    parents[id(child)] = outer
    within_match = Matcher(list(within)) if within else None

    def outside_within(stmt) -> bool:
        """With the site's ``within``: is ``stmt`` outside every branch (its body, not its
        else) or ``with`` that names one of its words? (the codemod's rule, on ast)"""
        if within_match is None:
            return False
        child, up = stmt, parents.get(id(stmt))
        while up is not None:
            if isinstance(up, (ast.If, ast.While)) and id(child) in in_body and _names_marker([up.test], within_match):
                return False
            if isinstance(up, (ast.With, ast.AsyncWith)) and _names_marker(up.items, within_match):
                return False
            child, up = up, parents.get(id(up))
        return True

    def on_path(stmt) -> bool:
        """Is ``stmt`` reached on the feature's path: every ``if`` around it tests a marker
        or the arch alone (an exit inside `if backend == "cutedsl_mla":` is that backend's)?"""
        up = parents.get(id(stmt))
        while up is not None:
            if isinstance(up, (ast.If, ast.While)) and not (
                    _names_marker([up.test], match, keywords=kw) or _pure(up.test, arch_expr)):
                return False
            up = parents.get(id(up))
        return True

    def unit_names(stmt, test) -> bool:
        if match is None:
            return site
        if isinstance(stmt, (ast.If, ast.While)):
            exits = any(isinstance(s, (ast.Return, ast.Raise)) for s in stmt.body) if site else _exits(stmt.body)
            if stmt.test is test and exits and _pure(test, arch_expr) and on_path(stmt):
                return True  # an early exit on the arch alone is on the feature's path
            if isinstance(stmt, ast.If) and stmt.test is test and feeds_marker(stmt):
                return True  # `if arch: ok = True ... return ok and <marker>`
            return _names_marker([test] + [s for s in stmt.body if isinstance(s, _SIMPLE)], match, keywords=kw)
        return _names_marker([stmt], match, keywords=kw)

    def add(node, stmt, mode, test=None):
        if node is None or isinstance(node, ast.JoinedStr) or not arch_expr(node):
            return  # an f-string is text (a message), not a gate
        out.append(_Root(rel, qual, node.lineno, node, scope, unit_names(stmt, test if test is not None else node), mode,
                         outside_within=outside_within(stmt)))

    def parts(node, stmt, mode):
        """A value whose arch-dependence is its conditional expressions' tests (a dict of
        backends with one `a if is_blackwell() else b`): those tests are the gates (exprs
        adds them), each other arch-reading element is its own."""
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for elt in node.elts:
                parts(elt, stmt, mode)
        elif isinstance(node, ast.Dict):
            for elt in [k for k in node.keys if k is not None] + node.values:
                parts(elt, stmt, mode)
        elif isinstance(node, ast.IfExp):
            parts(node.body, stmt, "value")
            parts(node.orelse, stmt, "value")
        else:
            add(node, stmt, "truth" if _booleanish(node) else mode)

    def exprs(stmt):
        """Gates nested in a statement's expressions: conditional expressions,
        comprehension tests, lambdas' bodies."""
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.IfExp):
                add(sub.test, stmt, "truth", sub.test)
            elif isinstance(sub, ast.comprehension):
                for cond in sub.ifs:
                    add(cond, stmt, "truth", cond)

    for dec in func.decorator_list:
        if arch_expr(dec):
            out.append(_Root(rel, qual, dec.lineno, dec, scope, True, "decorator"))
    stack = list(func.body)
    while stack:
        stmt = stack.pop(0)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(stmt, (ast.If, ast.While)):
            add(stmt.test, stmt, "truth", stmt.test)
            for sub in ast.walk(stmt.test):
                if isinstance(sub, ast.IfExp):
                    add(sub.test, stmt, "truth", sub.test)
            stack = list(stmt.body) + list(stmt.orelse) + stack
            continue
        if isinstance(stmt, ast.Match):
            if arch_expr(stmt.subject) or any(c.guard is not None and arch_expr(c.guard) for c in stmt.cases):
                feature = site or (match is not None and _names_marker([stmt], match, keywords=kw))
                out.append(_Root(rel, qual, stmt.subject.lineno, stmt, scope, feature, "match"))
            stack = [s for c in stmt.cases for s in c.body] + stack
            continue
        if isinstance(stmt, ast.Assert):
            add(stmt.test, stmt, "truth", stmt.test)
            exprs(stmt)
            continue
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.Try)):
            head = [stmt.iter] if isinstance(stmt, (ast.For, ast.AsyncFor)) else \
                [i.context_expr for i in stmt.items] if isinstance(stmt, (ast.With, ast.AsyncWith)) else []
            for h in head:
                add(h, stmt, "value")
            body = list(stmt.body) + list(getattr(stmt, "orelse", [])) + list(getattr(stmt, "finalbody", []))
            for handler in getattr(stmt, "handlers", []):
                body += handler.body
            stack = body + stack
            continue
        value = getattr(stmt, "value", None) if isinstance(stmt, (ast.Return, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)) else None
        if isinstance(stmt, ast.Expr) and _is_log_call(value):
            continue  # a log line says what the arch is; it gates nothing
        if isinstance(stmt, ast.Raise):
            value = stmt.exc
        if value is not None and arch_expr(value):
            mode = "truth" if _booleanish(value) else "value"
            if isinstance(value, ast.Call) and mode == "value":
                # a call with an arch argument (`f(enabled=is_sm100_supported())`): the arguments
                for arg in list(value.args) + [k.value for k in value.keywords]:
                    add(arg, stmt, "truth" if _booleanish(arg) else "value")
                if arch_expr(value.func):
                    add(value, stmt, mode)
            elif isinstance(value, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
                parts(value, stmt, mode)
            else:
                add(value, stmt, mode)
        exprs(stmt)
    return out


def _nested_defs(func) -> dict:
    out = {}
    stack = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            stack += list(getattr(node, "body", [])) + list(getattr(node, "orelse", []))
    return out


def _pure(test: ast.AST, reads) -> bool:
    """Is a condition made of arch reads only (no setting, no argument)?"""
    if isinstance(test, ast.BoolOp):
        return all(_pure(v, reads) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _pure(test.operand, reads)
    return reads(test)


_LOG = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log", "print", "print_once",
        "warning_once", "info_once"}


def _is_log_call(node) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in _LOG


def _booleanish(node: ast.AST) -> bool:
    return isinstance(node, (ast.BoolOp, ast.Compare)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not))


# -- evaluating a gate ---------------------------------------------------------------------
_MISSING: Any = object()


class _Undecided(Exception):
    def __init__(self, what: str, arch: str):
        super().__init__(what)
        self.what, self.arch = what, arch


class Judge:
    """Evaluates gates of one version of the examined files under every registry arch.

    An arch read the evaluator cannot decide alone (it depends on an argument or a setting
    too: ``apply_fusion(batch_size)``, a local ``ok = is_blackwell and flag``) is opened up:
    a local or module-level name is replaced by the expression it is bound to, a call of a
    function of the tree by its body as one expression (``if t: return a`` chains become
    conditional expressions), with the callee's parameters and settings as free atoms."""

    def __init__(self, index: Index, arch_expr: Callable[[ast.AST], bool]):
        # a name read as an arch fact whose definition in the tree reads no arch
        # (`_is_sm120_supported = bool(os.environ[...])`) is undecided, never its name's family
        self.reads_arch = ArchReads(index).def_is_arch
        self.evaluators = {name: Evaluator(index, a.cc, None, strict=True, reads_arch=self.reads_arch)
                           for name, a in ARCHES.items()}
        self.arch_expr = arch_expr
        self.index = index
        self._expanded: dict[tuple, Any] = {}
        self._leaves: dict[tuple, Any] = {}  # (node, scope, arch, mode) -> the evaluator's answer
        self._texts: dict[int, tuple[ast.AST, str]] = {}  # id(node) -> (node, ast.unparse(node))

    def _text(self, node: ast.AST) -> str:
        """``ast.unparse(node)``, once per node (an atom is named in every row of every arch)."""
        hit = self._texts.get(id(node))
        if hit is None or hit[0] is not node:
            hit = self._texts[id(node)] = (node, ast.unparse(node))
        return hit[1]

    def values(self, root: _Root) -> dict[str, str]:
        """arch -> the gate's value (raises _Undecided)."""
        if root.mode == "match":
            return {name: self._match(root.node, root.scope, name, ev) for name, ev in self.evaluators.items()}
        atoms: dict[str, ast.AST] = {}
        mode = "truth" if root.mode == "decorator" else root.mode
        if root.mode == "decorator":
            return {a: self._decorator(root.node, root.scope, a, ev) for a, ev in self.evaluators.items()}
        self._atoms(root.node, root.scope, "", atoms, mode, 0)
        names = sorted(atoms)
        rows = list(itertools.product((False, True), repeat=len(names))) if len(names) <= MAX_ATOMS else [None]
        out = {}
        for arch, ev in self.evaluators.items():
            cells = []
            for row in rows:
                env = dict(zip(names, row)) if row is not None else {}
                cells.append(self._eval(root.node, root.scope, "", ev, arch, env, mode, 0))
            out[arch] = _render(names, rows, cells)
        return out

    def _decorator(self, node, scope, arch, ev) -> str:
        v = ev.value(node, scope)
        if v is UNKNOWN:
            raise _Undecided(f"decorator {ast.unparse(node)}", arch)
        return repr(plain(v)) if not isinstance(v, (Func, Partial)) else f"<function {ast.unparse(node)}>"

    # -- structure ----------------------------------------------------------------------
    def _decided(self, node, scope, mode) -> bool:
        for ev in self.evaluators.values():
            v = ev.truth(node, scope) if mode == "truth" else ev.value(node, scope)
            if v is UNKNOWN:
                return False
        return True

    def _expand(self, node, scope: Scope, depth: int):
        """(expression, scope, atom prefix) an undecided arch read stands for, or None."""
        key = (id(node), scope.key)
        if key in self._expanded:
            return self._expanded[key]
        self._expanded[key] = None  # cycle guard
        out = None
        if depth < 6:
            out = self._expand_uncached(node, scope)
        self._expanded[key] = out
        return out

    def _expand_uncached(self, node, scope: Scope):
        ev = next(iter(self.evaluators.values()))
        if isinstance(node, ast.Name):
            bound = scope.local.get(node.id) if node.id in scope.local else None
            if isinstance(bound, ast.expr):
                return bound, scope, ""
            if node.id in scope.local:
                return None
            d = self.index.resolve(node.id, scope.file)
            if d is not None and isinstance(d.node, ast.expr) and self.reads_arch(d):
                return d.node, Scope(d.file, d.cls, {}), f"{d.name}:"
            return None  # not an arch read after all (its name said so): undecided
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" and scope.cls:
            exprs = self.index.self_assignments(scope.file, scope.cls, node.attr)
            if len(exprs) == 1:
                return exprs[0], Scope(scope.file, scope.cls, {}), f"self.{node.attr}:"
            method = self.index.method(scope.file, scope.cls, node.attr)
            if method is not None and not exprs:
                if transparent(method) and is_property(method):
                    return _function_expr(method, scope.file, scope.cls)
            return None
        if isinstance(node, ast.Call):
            callee = ev.value(node.func, scope)
            if isinstance(callee, Partial):
                callee = callee.func
            if isinstance(callee, Func) and isinstance(callee.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return _function_expr(callee.node, callee.file, callee.cls)
            if isinstance(callee, Func) and isinstance(callee.node, ast.Lambda):
                return callee.node.body, Scope(callee.file, None, bind_call(callee.node.args, [], {}, False)), "lambda:"
        return None

    def _atoms(self, node, scope, prefix, atoms, mode, depth):
        if isinstance(node, ast.BoolOp):
            for v in node.values:
                self._atoms(v, scope, prefix, atoms, "truth", depth)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self._atoms(node.operand, scope, prefix, atoms, "truth", depth)
        elif isinstance(node, ast.IfExp):
            self._atoms(node.test, scope, prefix, atoms, "truth", depth)
            self._atoms(node.body, scope, prefix, atoms, mode, depth)
            self._atoms(node.orelse, scope, prefix, atoms, mode, depth)
        elif isinstance(node, ast.Constant):
            pass
        elif not self.arch_expr(node, scope):
            if mode == "truth":
                atoms[prefix + self._text(node)] = node
        elif not self._decided(node, scope, mode):
            expanded = self._expand(node, scope, depth)
            if expanded is not None:
                expr, inner, pre = expanded
                self._atoms(expr, inner, prefix + pre, atoms, mode, depth + 1)

    def _eval(self, node, scope, prefix, ev: Evaluator, arch: str, env: dict, mode: str, depth: int):
        if isinstance(node, ast.BoolOp):
            vals = [self._eval(v, scope, prefix, ev, arch, env, "truth", depth) for v in node.values]
            if isinstance(node.op, ast.And):
                return _k_and(vals)
            return _k_or(vals)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            v = self._eval(node.operand, scope, prefix, ev, arch, env, "truth", depth)
            return UNKNOWN if v is UNKNOWN else not v
        if isinstance(node, ast.IfExp):
            t = self._eval(node.test, scope, prefix, ev, arch, env, "truth", depth)
            if t is UNKNOWN:
                a, b = (self._eval(x, scope, prefix, ev, arch, env, mode, depth) for x in (node.body, node.orelse))
                return a if a == b else UNKNOWN
            return self._eval(node.body if t else node.orelse, scope, prefix, ev, arch, env, mode, depth)
        if isinstance(node, ast.Constant):
            return bool(node.value) if mode == "truth" else repr(node.value)
        if not self.arch_expr(node, scope):
            if mode == "truth":
                return env.get(prefix + self._text(node), UNKNOWN)
            if isinstance(node, ast.Constant):
                return repr(node.value)
            return f"<{self._text(node)}>"  # a value that does not depend on the arch
        leaf = (id(node), scope.key, arch, mode)
        v = self._leaves.get(leaf, _MISSING)
        if v is _MISSING:
            v = self._leaves[leaf] = ev.truth(node, scope) if mode == "truth" else ev.value(node, scope)
        if v is UNKNOWN:
            expanded = self._expand(node, scope, depth)
            if expanded is None:
                raise _Undecided(ast.unparse(node), arch)
            expr, inner, pre = expanded
            return self._eval(expr, inner, prefix + pre, ev, arch, env, mode, depth + 1)
        if mode == "truth":
            return bool(v)
        if isinstance(v, (Func, Partial)):
            return f"<function {self._text(node)}>"
        if v is VERSION:
            return "<cuda version>"
        return repr(plain(v))

    def _match(self, stmt: ast.Match, scope: Scope, arch: str, ev: Evaluator) -> str:
        subject = ev.value(stmt.subject, scope)
        if subject is UNKNOWN:
            raise _Undecided(ast.unparse(stmt.subject), arch)
        subject = plain(subject)
        for i, case in enumerate(stmt.cases):
            hit = _pattern(case.pattern, subject, ev, scope)
            if hit is UNKNOWN:
                raise _Undecided(f"case {ast.unparse(case.pattern)}", arch)
            if hit and case.guard is not None:
                g = ev.truth(case.guard, scope)
                if g is UNKNOWN:
                    raise _Undecided(f"case guard {ast.unparse(case.guard)}", arch)
                hit = g
            if hit:
                return f"case {i + 1}"
        return "no case"


def _function_expr(func, file: str, cls: str | None):
    """A function's body as one expression, with its scope: (expr, scope, prefix) or None."""
    expr = _body_expr(list(func.body), 0)
    if expr is None:
        return None
    local = bind_call(func.args, [], {}, cls is not None)
    local.update({k: v for k, v in assignments(func).items() if k not in local})
    return expr, Scope(file, cls, local), f"{func.name}:"


def _body_expr(stmts: list, size: int):
    """``if t: return a`` / ``return b`` as ``a if t else b`` (None: a shape not followed)."""
    if size > 40:
        return None
    for i, st in enumerate(stmts):
        if isinstance(st, ast.Return):
            return st.value if st.value is not None else ast.Constant(None)
        if isinstance(st, ast.If):
            rest = stmts[i + 1:]
            a = _body_expr(list(st.body) + rest, size + 1)
            b = _body_expr(list(st.orelse) + rest, size + 1)
            if a is None or b is None:
                return None
            return ast.IfExp(st.test, a, b)
        if isinstance(st, (ast.Assign, ast.AnnAssign, ast.Pass, ast.Import, ast.ImportFrom)) or (
                isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)):
            continue
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            continue  # a logging call
        return None
    return ast.Constant(None)


def _pattern(p, value, ev: Evaluator, scope: Scope):
    if isinstance(p, ast.MatchAs):
        return True if p.pattern is None else _pattern(p.pattern, value, ev, scope)
    if isinstance(p, ast.MatchOr):
        results = [_pattern(q, value, ev, scope) for q in p.patterns]
        return True if True in results else UNKNOWN if UNKNOWN in results else False
    if isinstance(p, ast.MatchValue):
        v = ev.value(p.value, scope)
        return UNKNOWN if v is UNKNOWN else plain(v) == value
    if isinstance(p, ast.MatchSingleton):
        return value is p.value
    if isinstance(p, ast.MatchSequence):
        if not isinstance(value, (tuple, list)):
            return False
        stars = [q for q in p.patterns if isinstance(q, ast.MatchStar)]
        if stars:
            return UNKNOWN
        if len(p.patterns) != len(value):
            return False
        results = [_pattern(q, v, ev, scope) for q, v in zip(p.patterns, value)]
        return False if False in results else UNKNOWN if UNKNOWN in results else True
    return UNKNOWN


def _k_and(vals):
    if any(v is False for v in vals):
        return False
    return True if all(v is True for v in vals) else UNKNOWN


def _k_or(vals):
    if any(v is True for v in vals):
        return True
    return False if all(v is False for v in vals) else UNKNOWN


def _render(names, rows, cells) -> str:
    if len(cells) == 1 and rows == [()]:
        return str(cells[0])
    if rows == [None]:
        return f"three-valued: {cells[0]}"
    true_rows = [row for row, c in zip(rows, cells) if c is True]
    unknown = [row for row, c in zip(rows, cells) if c is UNKNOWN]
    if not unknown and all(isinstance(c, bool) for c in cells) and names:
        # only the atoms the value depends on: one function, one text (`a and not c or a
        # and c` is `a`), so an edit that adds an atom without changing a value is not a change
        table = dict(zip(rows, cells))
        keep = [i for i in range(len(names))
                if any(table[row] != table[row[:i] + (not row[i],) + row[i + 1:]] for row in rows)]
        if len(keep) < len(names):
            sub_rows = sorted({tuple(row[i] for i in keep) for row in rows})
            sub = {tuple(row[i] for i in keep): c for row, c in table.items()}
            return _render([names[i] for i in keep], sub_rows, [sub[r] for r in sub_rows])
        if not true_rows:
            return "False"
        if len(true_rows) == len(rows):
            return "True"
        return "when " + " or ".join(
            "(" + " and ".join(n if v else f"not {n}" for n, v in zip(names, row)) + ")" for row in true_rows)
    return "; ".join(f"{dict(zip(names, row))}: {c}" for row, c in zip(rows, cells))


# -- the verifier --------------------------------------------------------------------------
@dataclass
class Version:
    """The examined files in one state (before or after the patch)."""

    texts: dict[str, str]
    trees: dict[str, ast.Module] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)

    def parse(self, same: Version | None = None, shared: dict[tuple[str, str], ast.Module] | None = None) -> None:
        """``same``: the other state; a file whose text did not change shares its tree (read
        only here; every memo over nodes belongs to one state's judge). ``shared`` ((rel,
        text) -> tree) holds the trees of the series' texts (``engine._Overlay.ast_tree``):
        a text parsed once, whichever patch or step asks."""
        for rel, text in self.texts.items():
            if same is not None and same.texts.get(rel) == text and rel in same.trees:
                self.trees[rel] = same.trees[rel]
                continue
            held = shared.get((rel, text)) if shared is not None else None
            if held is not None:
                self.trees[rel] = held
                continue
            try:
                self.trees[rel] = ast.parse(text)
            except SyntaxError as exc:
                self.broken[rel] = f"{rel}:{exc.lineno}: {exc.msg}"
                continue
            if shared is not None:
                shared[(rel, text)] = self.trees[rel]


def arch_reader(index_names: set[str]) -> Callable[[ast.AST], bool]:
    """Does an expression read an arch fact? By its words, or by naming a definition of the
    examined files built on one (``_use_fusion = _is_sm100_supported and ...``)."""
    memo: dict[int, bool] = {}

    def reads(node: ast.AST) -> bool:
        key = id(node)
        if key not in memo:
            hit = False
            for n in ast.walk(node):
                name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
                if name is not None and (ARCH_WORDS.search(name) or name in index_names):
                    hit = True
                    break
            memo[key] = hit
        return memo[key]

    return reads


def _statements(body):
    """Every statement under ``body`` (nested blocks, functions and classes included);
    expressions are not visited."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in reversed(getattr(node, name, ()) or ()):
                if isinstance(child, (ast.excepthandler, ast.match_case)):
                    stack.extend(reversed(child.body))
                elif isinstance(child, ast.stmt):
                    stack.append(child)


def _binds(tree: ast.Module) -> tuple[list[tuple[str, ast.AST]], dict[str, list[ast.AST]]]:
    """What one file binds that may carry an arch read: (name, value) pairs (module-level
    assignments, decorators, import aliases, what functions return) and self attributes."""
    binds: list[tuple[str, ast.AST]] = []
    attrs: dict[str, list[ast.AST]] = {}
    owner: list = []
    for node in _statements(tree.body):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    attrs.setdefault(t.attr, []).append(node.value)
            if node.col_offset == 0:
                binds.extend((t.id, node.value) for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            owner.append(node)
            binds += [(node.name, d) for d in node.decorator_list]
        elif isinstance(node, ast.ImportFrom):
            binds += [(a.asname, ast.Name(a.name)) for a in node.names if a.asname]
    for func in owner:
        binds += [(func.name, r.value) for r in _statements(func.body)
                  if isinstance(r, ast.Return) and r.value is not None]
    return binds, attrs


_Words = tuple[bool, frozenset[str]]  # (a name in it is an arch word, every name it reads)


@functools.lru_cache(maxsize=4096)
def _arch_word(name: str) -> bool:
    return bool(ARCH_WORDS.search(name))


def _words(value: ast.AST) -> _Words:
    """The names an expression reads (``Name`` ids and attribute names), walked once: a bind is
    read again at every round of :func:`_derived`'s fixed point."""
    found = frozenset(n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(value)
                      if isinstance(n, (ast.Name, ast.Attribute)))
    return any(map(_arch_word, found)), found


def _derived(trees: dict[str, ast.Module], seeds: set[str], memo: dict[int, tuple] | None = None) -> set[str]:
    """Names the examined files bind from arch reads, to a fixed point (an alias of a
    predicate is itself an arch read): module-level names, functions returning one (or
    decorated by one), closures, import aliases, and self attributes every assignment of
    which reads the arch. A function's other locals are its own (:class:`Reader`).
    ``memo`` (id of a tree -> the tree and the names its binds read) spares a tree shared by
    both states, or by the patches of a series, a second walk."""
    names = set(seeds)
    bind_words: list[tuple[str, _Words]] = []
    attr_words: dict[str, list[_Words]] = {}
    for tree in trees.values():
        held = memo.get(id(tree)) if memo is not None else None
        if held is not None and held[0] is tree:
            tb, ta = held[1], held[2]
        else:
            binds, attrs = _binds(tree)
            tb = [(name, _words(value)) for name, value in binds]
            ta = {name: [_words(v) for v in values] for name, values in attrs.items()}
            if memo is not None:
                memo[id(tree)] = (tree, tb, ta)  # the tree held: its id stays its own
        bind_words += tb
        for name, values in ta.items():
            attr_words.setdefault(name, []).extend(values)

    def reads(read: _Words) -> bool:
        return read[0] or not read[1].isdisjoint(names)

    changed = True
    while changed:
        changed = False
        for name, read in bind_words:
            if name not in names and not _arch_word(name) and reads(read):
                names.add(name)
                changed = True
        for name, reads_of in attr_words.items():
            if name not in names and all(reads(r) for r in reads_of):
                names.add(name)
                changed = True
    return names


class Reader:
    """Does an expression, in a scope, read an arch fact? Globally derived names, or a local
    of the scope bound to an arch read."""

    def __init__(self, names: set[str]):
        self.names = names
        self._global = arch_reader(names)
        self._memo: dict[tuple, bool] = {}

    def __call__(self, node: ast.AST, scope: Scope | None = None) -> bool:
        if self._global(node):
            return True
        if scope is None or not isinstance(scope.local, dict):
            return False
        key = (id(node), scope.key)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False  # cycle guard
        hit = False
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in scope.local:
                bound = scope.local[n.id]
                if isinstance(bound, tuple) and bound and bound[0] == "unpack":
                    bound = bound[1]
                if isinstance(bound, ast.AST) and self(bound, scope):
                    hit = True
                    break
        self._memo[key] = hit
        return hit


def verify_patch(before: dict[str, str], after: dict[str, str], library: Callable[[set[str]], list[SourceFile]],
                 markers: list[str], site_functions: dict[str, set[str]], arch: Arch, patch_arches: list[str],
                 widening: bool, absorbed: set[tuple[str, str]], line_back: Callable[[str, int], int],
                 changed: set[str], within: dict[str, tuple[str, ...]] | None = None,
                 trees: dict[tuple[str, str], ast.Module] | None = None,
                 memo: dict[str, dict] | None = None) -> list[GateCheck]:
    """Judge every gate of the feature in the examined files (``before``/``after``: rel ->
    text, the same keys). ``library`` gives parsed definitions of other modules the examined
    files import (predicates), ``site_functions`` the site functions the engine found
    (rel -> bare names), ``absorbed`` (rel, function) pairs a codemod claims already accept
    the arch, ``line_back(rel, line)`` an after line as a before line; ``trees`` the parsed
    texts of the series' earlier patches (``Version.parse``); ``memo`` the series' memo of what
    a tree yields whatever the patch (the names its binds read, the gates a patch's markers and
    sites find in it), so a patch judging a file another patch judged reads it once."""
    match = Matcher(markers) if markers else None
    old, new = Version(before), Version(after)
    old.parse(shared=trees)
    new.parse(same=old, shared=trees)
    checks: list[GateCheck] = []
    for rel, why in new.broken.items():
        checks.append(GateCheck(rel, 0, "<module>", "", UNVERIFIED, f"cannot be evaluated: {why}", None))
    lib = library(set(after) | set(before))
    family = _target_family(arch, patch_arches)
    references = _references(arch) if widening else []
    judged: dict[str, dict[tuple, tuple[_Root, dict | None, str | None]]] = {}
    memo = memo if memo is not None else {}
    found_roots: dict[tuple, tuple[ast.Module, list[_Root]]] = memo.setdefault("roots", {})
    binds_memo: dict[int, tuple] = memo.setdefault("binds", {})  # id(tree) -> (tree, ...): the tree held
    judges: dict[tuple, tuple] = memo.setdefault("judges", {})  # see ``_judge_of``
    marker_key = tuple(markers)
    within_key = tuple(sorted(within.items())) if within else ()
    # a step that changed none of the examined files (a patch whose gates an earlier one of
    # the series widened): the after state is the before state, the same trees, so it is
    # judged once (same index, same names, lines unmapped)
    unchanged = not (changed & set(new.trees)) and new.trees.keys() == old.trees.keys() \
        and all(new.trees[rel] is tree for rel, tree in old.trees.items())
    for label, version in (("before", old), ("after", new)):
        if label == "after" and unchanged:
            judged["after"] = judged["before"]
            break
        names, reads, judge, judged_roots = _judge_of(version, lib, judges, binds_memo)
        out: dict[tuple, tuple[_Root, dict | None, str | None]] = {}
        for rel, tree in version.trees.items():
            # the gates of a tree depend on it, the arch names, the markers, the site functions
            # there, what is claimed absorbed there and `within`: the same inputs, the same gates
            sites_here = site_functions.get(rel, set())
            key = (rel, id(tree), names, marker_key, frozenset(sites_here),
                   frozenset(a for a in absorbed if a[0] == rel), within_key)
            prior_roots = found_roots.get(key)
            if prior_roots is not None and prior_roots[0] is tree:
                roots = prior_roots[1]
            else:
                lines = version.texts[rel].splitlines(keepends=True)
                roots = _file_roots(rel, tree, reads, match, sites_here, absorbed, lines, within)
                found_roots[key] = (tree, roots)  # the tree held: its id stays its own
            for root in roots:
                line = root.line if label == "before" else line_back(rel, root.line)
                held_values = judged_roots.get(id(root))
                if held_values is None or held_values[0] is not root:
                    try:
                        values, why = judge.values(root), None
                    except _Undecided as exc:
                        values, why = None, f"cannot evaluate `{exc.what}` on {exc.arch}"
                    except RecursionError:
                        values, why = None, "too deep to evaluate"
                    held_values = judged_roots[id(root)] = (root, values, why)
                values, why = held_values[1], held_values[2]
                key = (rel, root.qual, root.mode, line)
                n = 0
                while key + (n,) in out:
                    n += 1
                out[key + (n,)] = (root, values, why)
        judged[label] = out
    for key, (root, values, why) in judged["after"].items():
        rel, qual, mode, line, _n = key
        prior = judged["before"].get(key)
        before_values = prior[1] if prior else None
        expr = ast.unparse(root.node.subject if mode == "match" else root.node)
        if mode == "match":
            expr = "match " + expr
        edited = prior is None or rel in changed or (
            prior[0].node is not root.node and ast.unparse(prior[0].node) != ast.unparse(root.node))
        if values is None:
            if edited or root.feature or prior is None:
                checks.append(GateCheck(rel, line, qual, expr, UNVERIFIED, why or "cannot be evaluated",
                                        before_values, {}, root.feature, edited))
            continue
        if prior is not None and before_values is None and prior[2] and (root.feature or edited):
            checks.append(GateCheck(rel, line, qual, expr, UNVERIFIED, f"before the patch: {prior[2]}",
                                    None, values, root.feature, edited))
            continue
        if before_values is not None:
            moved = [a for a in ARCHES if a not in family and before_values.get(a) != values.get(a)]
            if moved:
                a = moved[0]
                checks.append(GateCheck(rel, line, qual, expr, WRONG,
                                        f"changes {', '.join(moved)} (before: {before_values[a]}; after: {values[a]})",
                                        before_values, values, root.feature))
                continue
        elif mode != "decorator":
            distinct = {values[a] for a in ARCHES if a not in family}
            if len(distinct) > 1 and not widening:
                checks.append(GateCheck(rel, line, qual, expr, WRONG,
                                        f"a new gate that tells apart arches outside {', '.join(sorted(family))}",
                                        None, values, root.feature))
                continue
        status, reason = OK, "evaluated on every arch"
        claims = (rel, qual.rsplit(".", 1)[-1]) in absorbed
        held = root.feature and (references and mode in ("truth", "match", "decorator") or claims)
        checks.append(GateCheck(rel, line, qual, expr, status, reason, before_values, values, held,
                                outside_within=root.outside_within))
    return _admission(checks, arch, references or _references(arch), absorbed)


def _judge_of(version: Version, lib: list[SourceFile], judges: dict[tuple, tuple],
              binds_memo: dict[int, tuple]) -> tuple[frozenset[str], Reader, Judge, dict[int, tuple]]:
    """The judge of one state of the examined files over ``lib``: (the arch names it reads,
    its reader, the judge, its values per root: id(root) -> (root, values, why)). Held in
    ``judges`` for the series: a patch that examines the same trees over the same library
    as an earlier one (a patch of the same feature after one that changed none of its files)
    is judged by the same judge, and each root it shares is evaluated once. The key holds
    object ids; the entry holds the objects, so no id is reused while it is held."""
    key = (tuple((rel, id(tree)) for rel, tree in version.trees.items()), tuple(id(f) for f in lib))
    held = judges.get(key)
    if held is None:
        files = [SourceFile(rel, b"", [Block(list(tree.body))]) for rel, tree in version.trees.items()]
        names = frozenset(_derived(version.trees, set(), binds_memo))
        reads = Reader(set(names))
        held = judges[key] = ((list(version.trees.values()), list(lib)), names, reads,
                              Judge(Index(lib + files), reads), {})
    return held[1], held[2], held[3], held[4]


def _admission(checks: list[GateCheck], arch: Arch, refs: list[str], absorbed) -> list[GateCheck]:
    """The target must be admitted as ONE reference arch is, through all of the feature's
    gates together: an ``elif`` per arch must not pass gate by gate, and neither may a
    feature whose default admits sm120 as sm100 while its check raises for it as for sm90."""
    idx = [i for i, c in enumerate(checks) if c.feature and c.status == OK]
    out = list(checks)
    if not idx:
        return out

    def misses(r: str) -> list[int]:
        return [i for i in idx if out[i].after.get(arch.name) != out[i].after.get(r)]

    best = min(refs, key=lambda r: (len(misses(r)), refs.index(r)))
    for i in misses(best):
        c = out[i]
        others = "; ".join(f"{r}: {c.after.get(r)}" for r in refs)
        reason = (f"does not admit {arch.name} as {best} does through {c.function} "
                  f"({arch.name}: {c.after.get(arch.name)}; {others})")
        if len(idx) > 1:
            reason += f"; the feature's other gates admit {arch.name} as {best}"
        if (c.file, c.function.rsplit(".", 1)[-1]) in absorbed:
            reason += "; the codemod says absorbed upstream"
        out[i] = dataclasses.replace(c, status=INCOMPLETE, reason=reason)
    return out


def _file_roots(rel: str, tree: ast.Module, reads, match: Matcher | None, sites: set[str],
                absorbed: set[tuple[str, str]], lines: list[str] | None = None,
                within: dict[str, tuple[str, ...]] | None = None) -> list[_Root]:
    funcs = _functions(tree)
    by_name = {}
    for node, qual, cls in funcs:
        by_name.setdefault(node.name, []).append((node, qual, cls))
    if _test_module(rel) and not sites:
        match = None  # a test module holds no gate of the feature unless a site is there
    feature = set()
    for node, qual, cls in funcs:
        if node.name in sites or (rel, node.name) in absorbed or (match is not None and _names_marker([node], match, lines)):
            feature.add(id(node))
    # the same-file functions a feature function calls (transitively, two levels)
    called: set[int] = set()
    frontier = [n for n, _q, _c in funcs if id(n) in feature]
    for _ in range(2):
        nxt = []
        for fn in frontier:
            for sub in ast.walk(fn):
                if isinstance(sub, ast.Call):
                    f = sub.func
                    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                    for node, _q, _c in by_name.get(name, ()):
                        if id(node) not in feature and id(node) not in called:
                            called.add(id(node))
                            nxt.append(node)
        frontier = nxt
    out = []
    for node, qual, cls in funcs:
        if id(node) in feature:
            site = node.name in sites or (rel, node.name) in absorbed
            out += _roots(node, rel, qual, cls, reads, match, site,
                          (within or {}).get(node.name, ()) if node.name in sites else ())
        elif id(node) in called:
            # a callee's control flow
            for r in _roots(node, rel, qual, cls, reads, None, False):
                if r.mode in ("truth", "match"):
                    # held to decidability and to other arches unchanged; what it returns
                    # reaches the feature through the caller's gates, which are evaluated
                    r.feature = False
                    out.append(r)
    return out


def _guards_exit(func, test) -> bool:
    """Is ``test`` the test of an ``if`` whose body returns or raises (an early exit)?"""
    for stmt in ast.walk(func):
        if isinstance(stmt, ast.If) and stmt.test is test:
            return any(isinstance(s, (ast.Return, ast.Raise)) for s in stmt.body)
    return False


def _target_family(arch: Arch, patch_arches: list[str]) -> set[str]:
    """Arches the patch may change: its own, and the target's family when the target heads it
    (sm120 brings sm121; sm103 narrows sm103 only)."""
    out = {arch.name, *patch_arches}
    if arch.gate_family == arch.name:
        out |= {a.name for a in ARCHES.values() if a.gate_family == arch.gate_family}
    return out


def _references(arch: Arch) -> list[str]:
    """The arches whose admission the target's must equal."""
    if arch.gate_family != arch.name and arch.gate_family in ARCHES:
        return [arch.gate_family]
    return [f for f in SIBLINGS if f != arch.gate_family]


def library_loader(read_bytes: Callable[[str], bytes | None], paths: set[str],
                   shared: dict[str, tuple[bytes, SourceFile]] | None = None) -> Callable[[set[str]], list[SourceFile]]:
    """Parsed definitions of the modules examined files import (two levels, star imports
    followed): what their predicates mean in THIS tree. ``shared`` (rel -> (bytes, parsed))
    carries them from one patch of a series to the next (a file's bytes must be the same)."""
    cache: dict[str, tuple[bytes, SourceFile]] = shared if shared is not None else {}

    def load(examined: set[str]) -> list[SourceFile]:
        todo, seen, out = [(rel, 0) for rel in examined], set(examined), []
        while todo:
            rel, depth = todo.pop()
            data = read_bytes(rel)
            if data is None:
                continue
            for module in _imported_modules(rel, data):
                for cand in module_files(module):
                    if cand in paths and cand not in seen:
                        seen.add(cand)
                        cdata = read_bytes(cand) or b""
                        held = cache.get(cand)
                        if held is None or held[0] != cdata:
                            held = cache[cand] = (cdata, parse_file(cand, cdata, ARCH_BYTES))
                        out.append(held[1])
                        if depth < 2:
                            todo.append((cand, depth + 1))
        return out

    return load


_FROM = re.compile(rb"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
_RELEVANT = re.compile(rb"\*|is_sm\d|capabilit|get_device_sm|blackwell|hopper|platform|is_cuda|_supported")


def _imported_modules(rel: str, data: bytes) -> list[str]:
    """Modules this file imports an arch-relevant name from (a predicate, the platform, a
    star import that may carry them)."""
    out = []
    for m in _FROM.finditer(data):
        level, module = len(m.group(1)), m.group(2).decode()
        if level == 0 and not module.startswith("sglang"):
            continue
        if not _RELEVANT.search(m.group(3)):
            continue
        out.append(absolute_module(rel, module, level))
    return out


# A marker found with an arch word in more files than this names no feature (`tp_size`,
# `backend`): outside the site modules it finds gates of everything. Gates there are found
# through the patch's distinctive markers and the site functions' calls; the run says so.
COMMON_MARKER_FILES = 40


def feature_scope(hits: list[tuple[str, list[str]]], in_site_module: Callable[[str], bool],
                  notes: list[str]) -> list[str]:
    """The feature files among ``hits`` (rel, the markers it names): a file outside the site
    modules counts through a distinctive marker only; ``notes`` gets one line per common one."""
    counts: dict[str, int] = {}
    for _rel, named in hits:
        for m in named:
            counts[m] = counts.get(m, 0) + 1
    common = {m for m, n in counts.items() if n > COMMON_MARKER_FILES}
    for m in sorted(common):
        notes.append(f"marker `{m}` is in {counts[m]} files with an arch word (more than {COMMON_MARKER_FILES}): "
                     "too common to name the feature, so gates outside the site modules are not found "
                     "through it; add a marker only the feature's code names to have them checked")
    return [rel for rel, named in hits if in_site_module(rel) or any(m not in common for m in named)]


def feature_file(data: bytes, needles: list[bytes]) -> bool:
    """Can this file hold a gate of the feature? (a marker and an arch word, bytes only)

    Substring tests, not one alternation regex: ``re`` scans an alternation of literals
    position by position (8x slower over a whole tree, bench/apply.py)."""
    return any(n in data for n in needles) and any(w in data for w in ARCH_BYTES)
