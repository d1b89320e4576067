"""Walking the parsed statements of a file for its gates: the conditions that read the arch,
with the statement's markers and the verdicts of :class:`~forgepatch.gates.reads.ArchReads`.
Statements whose lines name no arch word (a token, a name derived from an arch read, a local
bound to one) are skipped without looking inside."""

from __future__ import annotations

import ast
import bisect
import itertools
import re
from dataclasses import dataclass, field

from forgepatch.arch import ARCHES
from forgepatch.gates.bindings import Locals
from forgepatch.gates.classify import role
from forgepatch.gates.evaluate import Scope
from forgepatch.gates.model import ALWAYS, NEVER, Gate
from forgepatch.gates.reads import PREDICATE_NAME, ArchReads
from forgepatch.gates.scan import TOKENS, SourceFile
from forgepatch.gates.values import UNKNOWN

MAJOR_KEYWORDS = ("supported_major_versions",)
_TESTS = ("if", "elif", "while", "assert", "ifexp", "comprehension")
_COMMON = {"self", "cls", "torch", "cuda", "logger", "os", "envs", "True", "False", "None", "args", "kwargs",
           "len", "isinstance", "getattr", "hasattr", "print", "str", "int", "bool", "super", "warning", "info"}


def gates_of(reads: ArchReads, src: SourceFile, words: tuple[bytes, ...] = TOKENS, own: tuple[bytes, ...] = ()) -> list[Gate]:
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
        walker = _Walker(reads, src.rel, block.cls, block.line_offset, out, text)
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
        # a find per word, not one alternation regex: ``re`` tries the alternation at each
        # position (a word holds no newline, so both give the same lines; 1.3x faster walk)
        return sorted(self.find_lines(words, begin, end))

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

    def __init__(self, finder: ArchReads, file: str, cls: str | None, offset: int, out: list[Gate], text: _Text):
        self.finder, self.file, self.cls, self.offset, self.out = finder, file, cls, offset, out
        self.text = text

    def statement(self, node: ast.stmt, qual: list[str], scope: Scope, top: bool = False, elif_: bool = False,
                  hot: list[int] = ()) -> None:
        if not self.text.has(node, self.offset, hot):
            return  # nothing in it reads the arch (an arch read always names one of the words)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if PREDICATE_NAME.match(node.name) and (top or len(qual) == 1 and qual[0] == self.cls) \
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
                             _markers(stmt, body, set(atoms)), verdicts, unresolved, names, end, role(stmt, kind)))

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
