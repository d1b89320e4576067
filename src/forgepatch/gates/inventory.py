"""Every arch gate of an SGLang tree, with the feature it guards and the arches it lets through.

A *gate* is a condition in the code — an ``if``/``elif``/``while``/``assert`` test, a
conditional expression, a boolean ``return``, an assignment or call argument inside a function
— that reads the GPU architecture: an arch predicate (``is_sm100_supported()``,
``_is_sm100_supported``, ``get_platform().is_sm100``, ``is_blackwell_supported()``, or any
function or constant of the tree built on them), or the compute capability itself
(``torch.cuda.get_device_capability()``, ``get_device_sm()``, ``major in (9, 10)``), or a
``supported_major_versions=[...]`` argument. Predicates are resolved from their definitions in
the same tree (:mod:`forgepatch.gates.evaluate`), so ``is_blackwell_supported`` passes sm120
exactly in the releases whose definition says so.

For each gate and each registry arch the verdict is ``always`` (the condition holds on that
arch whatever else is set), ``never`` (it fails on that arch) or ``conditional`` (it holds on
that arch only if the other conditions in it do). The gate's *arches* are those not ``never``.
Functions that *define* a predicate (``is_*``, ``*_supported``) and module-level assignments
are definitions, not gates: the places that use them are.
"""

from __future__ import annotations

import ast
import bisect
import functools
import gc
import itertools
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch.arch import ARCHES
from forgepatch.gates.evaluate import CAPABILITY_CALLS, UNKNOWN, Evaluator, Func, Locals, Partial, Scope, statements
from forgepatch.gates.index import Definition, Index
from forgepatch.gates.scan import TOKENS, SourceFile, candidates, parse_file, read_tree

ALWAYS, CONDITIONAL, NEVER = "always", "conditional", "never"
MAJOR_KEYWORDS = ("supported_major_versions",)
_TESTS = ("if", "elif", "while", "assert", "ifexp", "comprehension")
_PREDICATE_NAME = re.compile(r"^_?(is|has|supports?|check)_\w+$|_supported$")
_COMMON = {"self", "cls", "torch", "cuda", "logger", "os", "envs", "True", "False", "None", "args", "kwargs",
           "len", "isinstance", "getattr", "hasattr", "print", "str", "int", "bool", "super", "warning", "info"}


@dataclass
class Gate:
    file: str
    line: int
    function: str  # "Class.method", "function" or "<module>"
    kind: str  # if | elif | while | assert | ifexp | return | assign | argument | keyword | comprehension
    expr: str  # the condition, as source
    atoms: list[str]  # the arch reads in it
    markers: list[str]  # identifiers of the statement: what the gate guards
    verdicts: dict[str, str]  # arch -> always | conditional | never
    unresolved: list[str] = field(default_factory=list)  # atoms unknown on every arch
    names: list[str] = field(default_factory=list)  # identifiers of the condition (not strings)
    end_line: int = 0  # last line of the condition

    @property
    def arches(self) -> list[str]:
        return [a for a, v in self.verdicts.items() if v != NEVER]

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        doc = dict(self.__dict__)
        doc["arches"] = self.arches
        return doc


@dataclass
class Predicate:
    name: str
    file: str
    line: int
    verdicts: dict[str, str]

    @property
    def arches(self) -> list[str]:
        return [a for a, v in self.verdicts.items() if v != NEVER]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "file": self.file, "line": self.line, "arches": self.arches,
                "verdicts": self.verdicts}


def gate_from_json(doc: dict[str, Any]) -> Gate:
    return Gate(**{k: v for k, v in doc.items() if k != "arches"})


@dataclass
class Inventory:
    source: str  # the source label (pypi:0.5.23, git:...@sha, dir:...)
    version: str | None
    gates: list[Gate] = field(default_factory=list)
    predicates: list[Predicate] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Inventory":
        return cls(doc["source"], doc["version"], [gate_from_json(g) for g in doc["gates"]],
                   [Predicate(p["name"], p["file"], p["line"], p["verdicts"]) for p in doc["predicates"]],
                   doc.get("stats", {}))

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "version": self.version, "arches": list(ARCHES),
                "predicates": [p.to_json() for p in self.predicates],
                "gates": [g.to_json() for g in self.gates], "stats": self.stats}


# -- building ---------------------------------------------------------------------------
def inventory(package: Path, source: str = "", version: str | None = None) -> Inventory:
    """The gates of the ``sglang/`` package directory ``package``."""
    started = time.perf_counter()
    return inventory_files(read_tree(Path(package)), source, version, started)


def inventory_files(all_files: dict[str, bytes], source: str = "", version: str | None = None,
                    started: float | None = None) -> Inventory:
    """The gates of a package given as {path inside the package: bytes} (a directory, a
    wheel or a git tree read the same way)."""
    started = started if started is not None else time.perf_counter()
    enabled = gc.isenabled()
    gc.disable()  # thousands of short-lived AST nodes: collection passes cost more than they free
    try:
        return _inventory_files(all_files, source, version, started)
    finally:
        if enabled:
            gc.enable()


def _inventory_files(all_files: dict[str, bytes], source: str, version: str | None, started: float) -> Inventory:
    files = {rel: data for rel, data in all_files.items() if not is_test(rel)}
    parsed = {rel: parse_file(rel, files[rel], TOKENS) for rel in candidates(files)}
    index = Index(list(parsed.values()))
    finder = _Finder(index)
    # names built on arch reads that carry no token ("_use_fp8 = _is_sm90_supported and ..."):
    # a second, narrower pass finds the places that use them, as whole identifiers: public
    # module-level names anywhere, private ones and self attributes in their own file
    public, private = finder.derived_names()
    if public or private:
        more_keys: dict[str, set[bytes]] = {}
        fresh_public = tuple(n.encode() for n in public if not any(t in n.encode() for t in TOKENS))
        for rel in candidates(files, fresh_public, whole_words=True) if fresh_public else ():
            more_keys.setdefault(rel, set()).update(fresh_public)
        for rel, names in private.items():
            more_keys.setdefault(rel, set()).update(n.encode() for n in names if not any(t in n.encode() for t in TOKENS))
        for rel, keys in sorted(more_keys.items()):
            if not keys:
                continue
            more = parse_file(rel, files[rel], tuple(sorted(keys)), whole_words=True)
            src = parsed.setdefault(rel, SourceFile(rel, files[rel]))
            have = {(b.line_offset, b.nodes[0].lineno) for b in src.blocks if b.nodes}
            fresh = [b for b in more.blocks if b.nodes and (b.line_offset, b.nodes[0].lineno) not in have]
            src.blocks += fresh
            index.add(SourceFile(rel, files[rel], fresh))
        finder = _Finder(index)
        public, private = finder.derived_names()
    inv = Inventory(source, version)
    shared = tuple(sorted(set(TOKENS) | {n.encode() for n in public} | {k.encode() for k in finder.arch_aliases()}))
    for rel in sorted(parsed):
        inv.gates += finder.gates(parsed[rel], shared, tuple(sorted(n.encode() for n in private.get(rel, ()))))
    inv.predicates = finder.predicates()
    inv.stats = {"files": len(files), "files_skipped": len(all_files) - len(files), "files_parsed": len(parsed),
                 "parse_errors": [s.error for s in parsed.values() if s.error],
                 "gates": len(inv.gates), "predicates": len(inv.predicates),
                 "seconds": round(time.perf_counter() - started, 3)}
    return inv


class _Finder:
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
        return self.index.platform_method(node.attr) is not None and _PREDICATE_NAME.match(node.attr) is not None

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
            result = method is not None and _PREDICATE_NAME.match(attr) is not None and self._returns_arch(method, file, cls)
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
                        value = ev.call_value(value, [], {}, Scope(d.file, d.cls, {})) if not required else UNKNOWN
                    t = _truth(value)
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

    def gates(self, src: SourceFile, words: tuple[bytes, ...] = TOKENS, own: tuple[bytes, ...] = ()) -> list[Gate]:
        """The gates of a parsed file; ``words`` name arch reads anywhere, ``own`` in this file only."""
        out: list[Gate] = []
        text = _Text(src.data, words, src.blocks, own)
        # statements of one big function, parsed apart, share the function's locals
        bodies: dict[tuple, _Body] = {}
        for block in src.blocks:
            if block.func is not None:
                bodies.setdefault((block.cls, block.func), _Body()).nodes.extend(block.nodes)
        scopes = {key: Scope(src.rel, key[0], Locals(body)) for key, body in bodies.items()}
        for block in src.blocks:
            walker = _Walker(self, src.rel, block.cls, block.line_offset, out, text)
            qual = [block.cls] if block.cls else []
            if block.func is not None:  # some statements of a big function's body
                scope = scopes[(block.cls, block.func)]
                local = walker.local_words(scope)
                for node in block.nodes:
                    walker.statement(node, qual + [block.func], scope, hot=text.local_lines(node, block.line_offset, local))
                continue
            for node in block.nodes:
                walker.statement(node, qual, Scope(src.rel, block.cls, {}), top=block.cls is None)
        return out


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", None)
    return decorators[0].lineno if decorators else node.lineno


def is_test(rel: str) -> bool:
    """Code that is not part of what serves: tests (``test/``, ``tests/``, ``test_*.py``,
    ``*_test.py``), benchmarks (``benchmark/``) and tooling in dot-directories (``.claude/...``)."""
    parts = rel.split("/")
    name = parts[-1]
    return any(p in _NOT_SERVING or p.startswith(".") for p in parts[:-1]) or name.startswith("test_") \
        or name.endswith("_test.py") or name == "conftest.py"


_NOT_SERVING = {"test", "tests", "benchmark", "benchmarks"}


def _truth(value):
    from forgepatch.gates.evaluate import truth

    return truth(value)


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


@functools.lru_cache(maxsize=64)
def _alternation(words: tuple[bytes, ...]) -> re.Pattern:
    return re.compile(b"|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)))


@dataclass
class _Body:
    nodes: list = field(default_factory=list)


class _Text:
    """Which lines of a file name an arch word, to skip statements that read nothing of it."""

    def __init__(self, data: bytes, words: tuple[bytes, ...], blocks, own: tuple[bytes, ...] = ()):
        self.data = data
        self.starts = [0, *itertools.accumulate(map(len, data.splitlines(keepends=True)))]
        hot: set[int] = set()
        for block in blocks:  # only the parsed parts of the file are walked
            if block.nodes:
                first = min(_first_line(n) for n in block.nodes) + block.line_offset
                last = max(n.end_lineno or n.lineno for n in block.nodes) + block.line_offset
                begin, end = self.starts[first - 1], self.starts[min(last, len(self.starts) - 1)]
                hot.update(self.lines(words, begin, end))
                hot.update(self.find_lines(own, begin, end))
        self.hot = sorted(hot)

    def find_lines(self, words: tuple[bytes, ...], begin: int, end: int) -> set[int]:
        out = set()
        for word in words:
            pos = self.data.find(word, begin, end)
            while pos >= 0:
                out.add(bisect.bisect_right(self.starts, pos))
                pos = self.data.find(word, pos + 1, end)
        return out

    def lines(self, words: tuple[bytes, ...], begin: int, end: int) -> list[int]:
        """Sorted line numbers in data[begin:end] holding one of ``words``."""
        if not words or begin >= end:
            return []
        pattern = _alternation(words)
        return sorted({bisect.bisect_right(self.starts, m.start()) for m in pattern.finditer(self.data, begin, end)})

    def span(self, node: ast.AST, offset: int) -> tuple[int, int]:
        return node.lineno + offset, (node.end_lineno or node.lineno) + offset

    def has(self, node: ast.AST, offset: int, extra: list[int] = ()) -> bool:
        first, last = self.span(node, offset)
        for hot in (self.hot, extra):
            i = bisect.bisect_left(hot, first)
            if i < len(hot) and hot[i] <= last:
                return True
        return False

    def local_lines(self, node: ast.AST, offset: int, words: tuple[bytes, ...]) -> list[int]:
        if not words:
            return []
        first, last = self.span(node, offset)
        return sorted(self.find_lines(words, self.starts[first - 1], self.starts[min(last, len(self.starts) - 1)]))


class _Walker:
    """Finds the gates of one block's statements."""

    def __init__(self, finder: _Finder, file: str, cls: str | None, offset: int, out: list[Gate], text: _Text):
        self.finder, self.file, self.cls, self.offset, self.out = finder, file, cls, offset, out
        self.text = text

    def statement(self, node: ast.stmt, qual: list[str], scope: Scope, top: bool = False, elif_: bool = False,
                  hot: list[int] = ()) -> None:
        if not self.text.has(node, self.offset, hot):
            return  # nothing in it reads the arch (an arch read always names one of the words)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _PREDICATE_NAME.match(node.name) and (top or len(qual) == 1 and qual[0] == self.cls) \
                    and self._defines_predicate(node, scope):
                return  # a predicate definition: its uses are the gates
            inner = Scope(self.file, scope.cls, Locals(node))
            local = self.text.local_lines(node, self.offset, self.local_words(inner))
            for stmt in node.body:
                self.statement(stmt, qual + [node.name], inner, hot=local)
            return
        if isinstance(node, ast.ClassDef):
            inner = Scope(self.file, node.name, {})
            for stmt in node.body:
                self.statement(stmt, qual + [node.name], inner, top=False, hot=hot)
            return
        if top and isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import, ast.ImportFrom)):
            return  # module-level definitions
        if isinstance(node, (ast.If, ast.While)):
            kind = "elif" if elif_ else ("if" if isinstance(node, ast.If) else "while")
            if self.text.has(node.test, self.offset, hot):
                self.root(node.test, kind, node, qual, scope, body=node.body)
            for stmt in node.body:
                self.statement(stmt, qual, scope, hot=hot)
            is_elif = isinstance(node, ast.If) and len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)
            for stmt in node.orelse:
                self.statement(stmt, qual, scope, elif_=is_elif, hot=hot)
            return
        if isinstance(node, ast.Assert):
            self.root(node.test, "assert", node, qual, scope)
            return
        if isinstance(node, ast.Return) and node.value is not None:
            self.root(node.value, "return", node, qual, scope)
            return
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            self.root(node.value, "assign", node, qual, scope)
            return
        if isinstance(node, ast.Expr):
            self.root(node.value, "argument", node, qual, scope)
            return
        for child in ast.iter_child_nodes(node):  # for / with / try / match bodies
            if isinstance(child, ast.stmt):
                self.statement(child, qual, scope, hot=hot)
            elif isinstance(child, ast.excepthandler):
                for stmt in child.body:
                    self.statement(stmt, qual, scope, hot=hot)

    def local_words(self, scope: Scope) -> tuple[bytes, ...]:
        """Local names bound to an arch read (``major, minor = get_device_capability()``)."""
        return tuple(name.encode() for name, bound in scope.local.items() if self._bound_is_arch(bound, scope))

    def _bound_is_arch(self, bound, scope: Scope) -> bool:
        if isinstance(bound, tuple) and bound and bound[0] == "unpack":
            bound = bound[1]
        return isinstance(bound, ast.AST) and self.finder.is_arch(bound, scope)

    def _defines_predicate(self, node, scope: Scope) -> bool:
        return self.finder._returns_arch(node, self.file, scope.cls)

    def root(self, expr: ast.expr, kind: str, stmt: ast.stmt, qual: list[str], scope: Scope, body=None) -> None:
        for gate_expr, gate_kind in self._gate_exprs(expr, kind, scope):
            self.emit(gate_expr, gate_kind, stmt, qual, scope, body)

    def _gate_exprs(self, expr: ast.expr, kind: str, scope: Scope):
        """Maximal boolean-shaped sub-expressions that read the arch."""
        if isinstance(expr, ast.IfExp):
            yield from self._gate_exprs(expr.test, "ifexp", scope)
            yield from self._gate_exprs(expr.body, kind, scope)
            yield from self._gate_exprs(expr.orelse, kind, scope)
            return
        if isinstance(expr, (ast.BoolOp, ast.Compare, ast.UnaryOp, ast.Name, ast.Attribute, ast.Call)) \
                and self.finder.is_arch(expr, scope) and (kind in _TESTS or self._boolean(expr, scope)):
            yield expr, kind
            return
        if isinstance(expr, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for gen in expr.generators:
                for cond in gen.ifs:
                    yield from self._gate_exprs(cond, "comprehension", scope)
            return
        if isinstance(expr, ast.Call):
            for kw in expr.keywords:
                if kw.arg in MAJOR_KEYWORDS:
                    yield kw, "keyword"
                else:
                    yield from self._gate_exprs(kw.value, "argument", scope)
            for arg in expr.args:
                yield from self._gate_exprs(arg, "argument", scope)
            return
        if isinstance(expr, (ast.Lambda,)):
            return
        for child in ast.iter_child_nodes(expr):
            if isinstance(child, ast.expr):
                yield from self._gate_exprs(child, kind if kind != "return" else "argument", scope)

    def emit(self, expr, kind: str, stmt: ast.stmt, qual: list[str], scope: Scope, body) -> None:
        if kind == "keyword":
            verdicts, atoms, text, unresolved = self._majors(expr, scope)
            if verdicts is None:
                return
        else:
            verdicts = self.finder.verdicts(expr, scope)
            found = self._atoms(expr, scope)
            atoms = [ast.unparse(a) for a in found]
            text = ast.unparse(expr)
            unresolved = [t for a, t in zip(found, atoms)
                          if all(ev.truth(a, scope) is UNKNOWN for ev in self.finder.evaluators.values())]
        line = (expr.lineno if hasattr(expr, "lineno") else stmt.lineno) + self.offset
        end = (getattr(expr, "end_lineno", None) or line - self.offset) + self.offset
        names = sorted({n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(expr)
                        if isinstance(n, (ast.Name, ast.Attribute))})
        self.out.append(Gate(self.file, line, ".".join(qual) or "<module>", kind, _short(text), atoms,
                             _markers(stmt, body, set(atoms)), verdicts, unresolved, names, end))

    def _boolean(self, expr: ast.expr, scope: Scope) -> bool:
        """A condition, not a value: a comparison or ``and``/``or``/``not``, or a read that
        is a bool on some arch (``is_sm100_supported()``, not ``get_device_capability()``)."""
        if isinstance(expr, (ast.BoolOp, ast.Compare)) or isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return True
        return any(isinstance(ev.value(expr, scope), bool) for ev in self.finder.evaluators.values())

    def _atoms(self, expr: ast.expr, scope: Scope) -> list[ast.expr]:
        if isinstance(expr, ast.BoolOp):
            return [a for v in expr.values for a in self._atoms(v, scope)]
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return self._atoms(expr.operand, scope)
        return [expr] if self.finder.is_arch(expr, scope) else []

    def _majors(self, kw: ast.keyword, scope: Scope):
        ev = next(iter(self.finder.evaluators.values()))
        majors = ev.value(kw.value, scope)
        if not isinstance(majors, (tuple, list)) or not all(isinstance(m, int) for m in majors):
            return None, None, None, None
        verdicts = {name: ALWAYS if arch.cc[0] in majors else NEVER for name, arch in ARCHES.items()}
        text = f"{kw.arg}={ast.unparse(kw.value)}"
        return verdicts, [text], text, []


def _short(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _markers(stmt: ast.stmt, body, atoms: set[str], limit: int = 8) -> list[str]:
    """Identifiers of the statement that say what it guards: attribute and variable names
    with an underscore (flags, backends, methods called), in order of appearance. For an
    ``if``: its test and the first statements of its body (their own headers, not nested blocks)."""
    roots: list[ast.AST] = []
    if isinstance(stmt, (ast.If, ast.While)):
        roots.append(stmt.test)
        for sub in list(body or [])[:6]:
            roots += _shallow(sub)
    else:
        roots += _shallow(stmt)
    seen: dict[str, None] = {}
    for root in roots:
        for node in ast.walk(root):
            ident = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else \
                node.arg if isinstance(node, ast.keyword) and node.arg else None
            if not ident or ident in _COMMON or "_" not in ident.strip("_") or any(ident in a for a in atoms):
                continue
            if re.match(r"^_?(is|get)_(sm\d+|blackwell|hopper|device|cuda|hip)", ident):
                continue
            seen.setdefault(ident)
    return list(seen)[:limit]


def _shallow(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions of a statement itself, not of the blocks nested in it."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, ast.Try):
        return []
    return [stmt]
