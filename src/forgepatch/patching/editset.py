"""What a patch changed, read off the trees: its edit set.

An edit set is derived from the file texts before and after a patch (never from what the
codemod reports), so a declarative patch and a custom ``.py`` codemod are described the same
way. Each scope (the module, a class body, a function) is flattened into its statements in
order: a simple statement as its normalised text (``ast.unparse``: quotes, parentheses and
spacing do not matter, comments and docstrings are not code), a compound statement as its
header (``if TEST``, ``for X in Y``, ``def NAME(ARGS)``, ...) with its blocks following it, one
import per imported name. Two flattened scopes are compared line by line
(``difflib.SequenceMatcher``); every run of differing statements is one :class:`Edit`:
file, qualified scope, the headers it sits under (``within``), the statements before and
after. Line numbers are kept for messages but are not part of an edit's identity, so the
same edit on a release where the function moved down is the same edit.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from forgepatch.patching.linediff import opcodes

MODULE = "<module>"


@dataclass(frozen=True)
class Edit:
    """One run of changed statements in one scope of one file."""

    file: str  # package-relative path
    function: str  # qualified scope: "Class.method", "func", "<module>"
    within: tuple[str, ...]  # headers of the compound statements around it, outermost first
    before: tuple[str, ...]  # normalised statements the patch removed or rewrote
    after: tuple[str, ...]  # normalised statements in their place
    line: int | None = field(default=None, compare=False, hash=False)  # where, in the text before

    @property
    def key(self) -> tuple:
        return (self.file, self.function, self.within, self.before, self.after)

    def to_doc(self) -> dict[str, Any]:
        return {"file": self.file, "function": self.function, "within": list(self.within),
                "before": list(self.before), "after": list(self.after)}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "Edit":
        return cls(str(doc["file"]), str(doc["function"]), tuple(map(str, doc.get("within", ()))),
                   tuple(map(str, doc.get("before", ()))), tuple(map(str, doc.get("after", ()))))

    def describe(self) -> str:
        """``before -> after`` in one line (for messages)."""
        def side(lines: tuple[str, ...]) -> str:
            return " / ".join(f"`{s}`" for s in lines) or "(nothing)"

        where = f" in `{self.within[-1]}`" if self.within else ""
        return f"{side(self.before)} -> {side(self.after)}{where}"


def digest(edits: Iterable[Edit]) -> str:
    """A short content hash of an edit set (order-independent, duplicates count)."""
    docs = sorted(json.dumps(e.to_doc(), sort_keys=True) for e in edits)
    return hashlib.sha256("\n".join(docs).encode("utf-8", "surrogateescape")).hexdigest()[:12]


def canonical(edits: Iterable[Edit]) -> list[Edit]:
    """An edit set in a stable order (file, scope, content)."""
    return sorted(edits, key=lambda e: (e.file, e.function != MODULE, e.function, json.dumps(e.to_doc())))


def series_edits(originals: dict[str, str], steps: list[tuple[str, dict[str, str]]]) -> dict[str, list[Edit]]:
    """patch id -> its edit set, for a series whose patches changed files in order
    (``steps``: (patch id, rel -> text after that patch)); ``originals`` are the texts
    before the series. Each patch is compared with the tree the previous ones left."""
    current = dict(originals)
    out: dict[str, list[Edit]] = {}
    for pid, changes in steps:
        edits: list[Edit] = []
        for rel in sorted(changes):
            added = current.get(rel) is None  # a file the series adds (add-files)
            before, after = current.get(rel) or "", changes[rel] or ""
            if after != before:
                edits += file_edits(rel, before, after, added=added)
            current[rel] = changes[rel]
        out[pid] = canonical(edits)
    return out


def file_edits(rel: str, before: str, after: str, *, added: bool = False) -> list[Edit]:
    """The edits that turn ``before`` into ``after`` (texts of file ``rel``; ``added``: the
    file is new).

    Only the top-level statements that differ are parsed (a patch touches a few functions
    of a file with hundreds); where the text cannot be cut into top-level statements that
    parse on their own, both files are parsed whole. Either way the same edits come out.
    A file that is not Python (``.cu``, ``.json``, ...) is compared line by line."""
    if not rel.endswith(PYTHON_SUFFIXES):
        return text_edits(rel, before, after, added=added)
    old_chunks, new_chunks = _chunks(before), _chunks(after)
    if old_chunks is not None and new_chunks is not None:
        edits: list[Edit] = []
        ok = True
        for tag, i1, i2, j1, j2 in opcodes([c[1] for c in old_chunks], [c[1] for c in new_chunks]):
            if tag == "equal":
                continue
            piece_b, piece_a = _join(old_chunks[i1:i2]), _join(new_chunks[j1:j2])
            try:
                found = _edits(rel, ast.parse(piece_b), piece_b, ast.parse(piece_a), piece_a)
            except (SyntaxError, ValueError):
                ok = False
                break
            edits += found
        if ok:
            return edits
    return _whole_file_edits(rel, before, after)


def _chunks(text: str) -> list[tuple[int, str]] | None:
    """The text cut before every top-level statement line: (first line, text); a decorator
    stays with what it decorates. None for a file with a form feed or a backslash at a line
    end (cut it whole)."""
    if "\f" in text or "\\\n" in text:
        return None
    starts = [m.start() for m in _TOP_LINE.finditer(text)]
    if not starts or starts[0] != 0:
        starts = [0] + starts
    out: list[tuple[int, str]] = []
    line = 1
    merged = False
    for k, at in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(text)
        piece = text[at:end]
        if merged:
            out[-1] = (out[-1][0], out[-1][1] + piece)
        else:
            out.append((line, piece))
        merged = piece.startswith("@")
        line += piece.count("\n")
    return out


def _join(chunks: list[tuple[int, str]]) -> str:
    """Consecutive chunks as one text whose lines are numbered as in the file."""
    if not chunks:
        return ""
    return "\n" * (chunks[0][0] - 1) + "".join(c[1] for c in chunks)


_TOP_LINE = re.compile(r"^(?![ \t#\n\r)\]}]|else\b|elif\b|except\b|finally\b|case\b)", re.M)


PYTHON_SUFFIXES = (".py", ".pyi")
TEXT_SCOPE = "<text>"  # the scope of every edit of a file that is not Python


def _text_line(line: str) -> str:
    """A line of a text file as an edit holds it: trailing blanks (a CR of CRLF among them)
    do not count; bytes that are not UTF-8 are shown escaped (``\\xe9``)."""
    return line.rstrip().encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def text_edits(rel: str, before: str, after: str, *, added: bool = False) -> list[Edit]:
    """The edits of a file that is not Python: each run of changed lines (normalised by
    ``_text_line``), in scope ``<text>``. A file the patch adds is one edit naming its size
    and content hash (its text is the patch's own file, reviewed with the patch)."""
    if added:
        raw = after.encode("utf-8", "surrogateescape")
        return [Edit(rel, TEXT_SCOPE, (), (), (f"<new file: {len(after.splitlines())} lines, "
                                               f"sha256 {hashlib.sha256(raw).hexdigest()[:12]}>",))]
    old, new = [_text_line(x) for x in before.splitlines()], [_text_line(x) for x in after.splitlines()]
    edits = []
    for tag, i1, i2, j1, j2 in opcodes(old, new):
        if tag != "equal":
            edits.append(Edit(rel, TEXT_SCOPE, (), tuple(old[i1:i2]), tuple(new[j1:j2]), i1 + 1))
    return edits


def _whole_file_edits(rel: str, before: str, after: str) -> list[Edit]:
    try:
        old_tree, new_tree = ast.parse(before), ast.parse(after)
        # only scopes whose source changed are flattened (ast.unparse is the cost)
    except (SyntaxError, ValueError) as exc:  # not Python we can read: the whole file is one edit
        why = f"<not parseable: {type(exc).__name__}>"
        return [Edit(rel, "<file>", (), (why, hashlib.sha256(before.encode("utf-8", "surrogateescape")).hexdigest()[:12]),
                     (hashlib.sha256(after.encode("utf-8", "surrogateescape")).hexdigest()[:12],))]
    return _edits(rel, old_tree, before, new_tree, after)


def _edits(rel: str, old_tree: ast.Module, before: str, new_tree: ast.Module, after: str) -> list[Edit]:
    old_spans, new_spans = _spans(old_tree, before), _spans(new_tree, after)
    changed = {q for q in old_spans.keys() | new_spans.keys() if old_spans.get(q) != new_spans.get(q)}
    old, new = _scopes(old_tree, changed), _scopes(new_tree, changed)
    edits: list[Edit] = []
    for qual in list(new) + [q for q in old if q not in new]:
        b, a = old.get(qual, []), new.get(qual, [])
        bt, at = [i[0] for i in b], [i[0] for i in a]
        if bt == at:
            continue
        for tag, i1, i2, j1, j2 in opcodes(bt, at):
            if tag == "equal":
                continue
            within = b[i1][1] if i1 < i2 else a[j1][1]
            line = b[i1][2] if i1 < len(b) else (b[-1][2] if b else None)
            edits.append(Edit(rel, qual, within, tuple(bt[i1:i2]), tuple(at[j1:j2]), line))
    return edits


# -- flattening ----------------------------------------------------------------------------
_Item = tuple  # (text, within, line)


def _blocks(st: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists directly inside a compound statement (not a def's or class's)."""
    out = [getattr(st, f) for f in ("body", "orelse", "finalbody") if isinstance(getattr(st, f, None), list)]
    out += [h.body for h in getattr(st, "handlers", ())] + [c.body for c in getattr(st, "cases", ())]
    return out


_LINE_ENDS = re.compile(r"(?<=\r\n)|(?<=\n)|(?<=\r)(?!\n)")


def _spans(tree: ast.Module, text: str) -> dict[str, str]:
    """qualified scope -> its source text (decorators included), for every def and class."""
    # lines as the parser counts them (\n, \r\n, \r): str.splitlines also splits at form
    # feeds and other separators, which would shift every span after one
    lines = _LINE_ENDS.split(text)
    spans: dict[str, str] = {}

    def walk(stmts: list[ast.stmt], qual: str) -> None:
        for st in stmts:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = st.name if qual == MODULE else f"{qual}.{st.name}"
                start = min([d.lineno for d in st.decorator_list] + [st.lineno])
                spans[inner] = spans.get(inner, "") + "".join(lines[start - 1:st.end_lineno])
                walk(st.body, inner)
            else:
                for body in _blocks(st):
                    walk(body, qual)

    walk(tree.body, MODULE)
    return spans


def _scopes(tree: ast.Module, only: set[str] | None = None) -> dict[str, list[_Item]]:
    """qualified scope -> its flattened statements; with ``only``, a def or class scope not
    in it is left out (its header still counts in the scope around it)."""
    scopes: dict[str, list[_Item]] = {}

    def block(stmts: list[ast.stmt], qual: str, within: tuple[str, ...]) -> None:
        items = scopes.setdefault(qual, [])
        for st in stmts:
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
                continue  # a docstring (or a bare string): not behaviour
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                items.append((_def_header(st), within, st.lineno))
                inner = st.name if qual == MODULE else f"{qual}.{st.name}"
                if only is None or inner in only:
                    block(st.body, inner, ())
            elif isinstance(st, (ast.Import, ast.ImportFrom)):
                for text in _imports(st):
                    items.append((text, within, st.lineno))
            elif isinstance(st, ast.If):
                # an elif chain is flat: each branch sits under its own test only, so a
                # branch added upstream does not move the ones after it
                keyword, branch = "if", st
                while True:
                    head = f"{keyword} {ast.unparse(branch.test)}"
                    items.append((head, within, branch.lineno))
                    block(branch.body, qual, within + (head,))
                    rest = branch.orelse
                    if len(rest) == 1 and isinstance(rest[0], ast.If):
                        keyword, branch = "elif", rest[0]
                        continue
                    if rest:
                        items.append(("else", within, rest[0].lineno))
                        block(rest, qual, within + ("else",))
                    break
            elif isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
                head = (f"while {ast.unparse(st.test)}" if isinstance(st, ast.While)
                        else f"for {ast.unparse(st.target)} in {ast.unparse(st.iter)}")
                items.append((head, within, st.lineno))
                block(st.body, qual, within + (head,))
                if st.orelse:
                    items.append(("else", within, st.orelse[0].lineno))
                    block(st.orelse, qual, within + (head, "else"))
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                head = "with " + ", ".join(ast.unparse(i) for i in st.items)
                items.append((head, within, st.lineno))
                block(st.body, qual, within + (head,))
            elif isinstance(st, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                items.append(("try", within, st.lineno))
                block(st.body, qual, within + ("try",))
                for h in st.handlers:
                    head = "except" + (f" {ast.unparse(h.type)}" if h.type else "") + (f" as {h.name}" if h.name else "")
                    items.append((head, within, h.lineno))
                    block(h.body, qual, within + (head,))
                for name, body in (("else", st.orelse), ("finally", st.finalbody)):
                    if body:
                        items.append((name, within, body[0].lineno))
                        block(body, qual, within + (name,))
            elif isinstance(st, ast.Match):
                head = f"match {ast.unparse(st.subject)}"
                items.append((head, within, st.lineno))
                for case in st.cases:
                    chead = f"case {ast.unparse(case.pattern)}" + (f" if {ast.unparse(case.guard)}" if case.guard else "")
                    items.append((chead, within + (head,), case.pattern.lineno))
                    block(case.body, qual, within + (head, chead))
            else:
                items.append((ast.unparse(st), within, st.lineno))

    block(tree.body, MODULE, ())
    return scopes


def _def_header(st: ast.AST) -> str:
    decorators = "".join(f"@{ast.unparse(d)} " for d in st.decorator_list)
    if isinstance(st, ast.ClassDef):
        bases = [ast.unparse(b) for b in st.bases] + [ast.unparse(k) for k in st.keywords]
        return f"{decorators}class {st.name}" + (f"({', '.join(bases)})" if bases else "")
    kind = "async def" if isinstance(st, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(st.returns)}" if st.returns else ""
    return f"{decorators}{kind} {st.name}({ast.unparse(st.args)}){returns}"


def _imports(st: ast.Import | ast.ImportFrom) -> list[str]:
    """One line per imported name, so a name added to a long import list is one edit."""
    def alias(a: ast.alias) -> str:
        return a.name + (f" as {a.asname}" if a.asname else "")

    if isinstance(st, ast.Import):
        return [f"import {alias(a)}" for a in st.names]
    module = "." * st.level + (st.module or "")
    return [f"from {module} import {alias(a)}" for a in st.names]
