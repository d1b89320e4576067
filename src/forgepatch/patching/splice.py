"""The text of an edited module, generated only where the edit changed it.

A codemod rewrites a few functions and ``finalize_module`` may add an import; libcst
rebuilds only the statements on the way down to them, so the edited module shares every
other statement node with the module it came from. ``Module.code`` still generates the
whole file (~30 ms for a 1,500-line file, once per patch that edits it). Here the shared
statements keep their text, cut out of the original, and only the changed statements are
generated, in their indentation.

Where each statement's text lies comes from the stdlib ``ast`` of the original text (the
first line of each statement) and libcst's own ownership of the comment and blank lines
above it (``leading_lines``): a statement runs from there to the start of the next one.
Each replaced or removed statement's text is held to its generated code before anything is
cut, so a span that is off by a line cannot splice; anything this cannot place (a module
without a trailing newline, ``\\r`` newlines, a header or footer that changed, statements
that do not line up with the ``ast``) gives None and the caller generates the whole module.
With ``FORGEPATCH_CHECK_SPLICE=1`` (the test suite sets it) every splice is compared with
``Module.code``; tests/test_splice.py also checks the spans of every statement of real files.
"""

from __future__ import annotations

import ast
import itertools
import os
from difflib import SequenceMatcher

import libcst as cst
from libcst._nodes.internal import CodegenState

_Span = tuple[int, int]  # [first line, end line) of a statement's text, 1-based


class _Cannot(Exception):
    """This edit cannot be spliced: the caller generates the whole module."""


CHECK_VARIABLE = "FORGEPATCH_CHECK_SPLICE"  # "1": every splice is compared with Module.code (the test suite)


def module_code(old: cst.Module, old_text: str, new: cst.Module, tree: ast.Module | None) -> str:
    """The text of ``new``, edited from ``old`` (parsed from ``old_text``; ``tree`` its stdlib
    ``ast``, None where there is none): spliced where it can be, else ``new.code``. An
    unchanged module is its text (libcst round-trips)."""
    if new is old:
        return old_text
    spliced = spliced_code(old, old_text, new, tree) if tree is not None else None
    if spliced is None:
        return new.code
    if os.environ.get(CHECK_VARIABLE) == "1" and spliced != new.code:
        raise AssertionError(f"{CHECK_VARIABLE}: the spliced text differs from Module.code")
    return spliced


def spliced_code(old: cst.Module, old_text: str, new: cst.Module, tree: ast.Module) -> str | None:
    """``new.code``, where ``new`` was edited from ``old`` (parsed from ``old_text``, whose
    stdlib ``ast`` is ``tree``); None where the statements cannot be placed."""
    if not (old.has_trailing_newline and new.has_trailing_newline and old_text.endswith("\n")
            and "\r" not in old_text and old.default_indent == new.default_indent
            and old.default_newline == new.default_newline == "\n" and _same(old.header, new.header)
            and _same(old.footer, new.footer) and old.body and new.body):
        return None
    text = _Text(old_text, old)
    lines = old_text.count("\n")
    first, end = len(old.header) + 1, lines + 1 - len(old.footer)
    try:
        body = _body(text, list(old.body), list(new.body), tree.body, end, [], first)
    except _Cannot:
        return None
    return "".join([text.cut(1, first), *body, text.cut(end, lines + 1)])


class _Text:
    """The original text by lines, and code generation in the module's style."""

    def __init__(self, text: str, module: cst.Module) -> None:
        self.text, self.module = text, module
        self.starts = [0, *itertools.accumulate(len(line) + 1 for line in text.split("\n"))]

    def cut(self, first: int, end: int) -> str:
        return self.text[self.starts[first - 1]:self.starts[end - 1]]

    def code(self, node: cst.CSTNode, indent: list[str]) -> str:
        state = CodegenState(default_indent=self.module.default_indent, default_newline=self.module.default_newline)
        state.indent_tokens.extend(indent)
        node._codegen(state)
        return "".join(state.tokens)


def _same(a, b) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _first_line(node: ast.stmt) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])


def _groups(stmts, nodes: list[ast.stmt]) -> list[list[ast.stmt]]:
    """The ``ast`` statements of each libcst statement of a body (a simple statement line
    holds one per ``;`` part)."""
    groups, i = [], 0
    for stmt in stmts:
        n = len(stmt.body) if isinstance(stmt, cst.SimpleStatementLine) else 1
        groups.append(nodes[i:i + n])
        i += n
    if i != len(nodes) or not all(groups):
        raise _Cannot
    return groups


def _start(stmt, group: list[ast.stmt]) -> int:
    """The first line of a statement's text: its first token's line less the comment and
    blank lines libcst gives it (above its decorators too)."""
    lead = len(stmt.leading_lines)
    decorators = getattr(stmt, "decorators", ())
    if decorators:
        lead += len(decorators[0].leading_lines)
    return _first_line(group[0]) - lead


def _spans(stmts, groups: list[list[ast.stmt]], end: int, first: int) -> list[_Span]:
    """The lines of each statement of a body: from its start to the next one's."""
    bounds = [_start(stmt, group) for stmt, group in zip(stmts, groups)] + [end]
    if bounds[0] != first or any(a >= b for a, b in zip(bounds, bounds[1:])):
        raise _Cannot
    return list(zip(bounds, bounds[1:]))


def _body(text: _Text, old: list, new: list, nodes: list[ast.stmt], end: int, indent: list[str],
          first: int) -> list[str]:
    """The text of the body ``new`` edited from ``old`` (its ``ast`` statements ``nodes``,
    its lines ``[first, end)``): runs of shared statements cut out of the text, the others
    generated; a class whose only change is inside its body is spliced the same way."""
    groups = _groups(old, nodes)
    spans = _spans(old, groups, end, first)
    out: list[str] = []
    matcher = SequenceMatcher(None, [id(s) for s in old], [id(s) for s in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.append(text.cut(spans[i1][0], spans[i2 - 1][1]))
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for i, j in zip(range(i1, i2), range(j1, j2)):
                out += _replaced(text, old[i], new[j], groups[i], spans[i], indent)
            continue
        for i in range(i1, i2):
            _held(text, old[i], spans[i], indent)
        out += [text.code(stmt, indent) for stmt in new[j1:j2]]
    return out


def _replaced(text: _Text, old, new, nodes: list[ast.stmt], span: _Span, indent: list[str]) -> list[str]:
    """One statement replaced by another: a class with the same header and block around a
    changed body is spliced inside; anything else is generated whole."""
    if (isinstance(old, cst.ClassDef) and isinstance(new, cst.ClassDef) and isinstance(old.body, cst.IndentedBlock)
            and isinstance(new.body, cst.IndentedBlock) and len(nodes) == 1 and isinstance(nodes[0], ast.ClassDef)
            and _class_frame_same(old, new)):
        inner = indent + [old.body.indent if old.body.indent is not None else text.module.default_indent]
        body_end = span[1] - len(old.body.footer)
        body_first = _start(old.body.body[0], nodes[0].body)  # (``_body`` checks the rest lines up)
        return [text.cut(span[0], body_first),
                *_body(text, list(old.body.body), list(new.body.body), nodes[0].body, body_end, inner, body_first),
                text.cut(body_end, span[1])]
    _held(text, old, span, indent)
    return [text.code(new, indent)]


def _class_frame_same(old: cst.ClassDef, new: cst.ClassDef) -> bool:
    """Everything of the class but its body's statements is the same nodes."""
    for name in ("name", "bases", "keywords", "decorators", "lpar", "rpar", "leading_lines", "lines_after_decorators",
                 "whitespace_after_class", "whitespace_after_name", "whitespace_before_colon", "type_parameters",
                 "whitespace_after_type_parameters"):
        a, b = getattr(old, name, None), getattr(new, name, None)
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            if not _same(a, b):
                return False
        elif a is not b:
            return False
    return (old.body.header is new.body.header and _same(old.body.footer, new.body.footer)
            and old.body.indent == new.body.indent and bool(old.body.body))


def _held(text: _Text, stmt, span: _Span, indent: list[str]) -> None:
    """A statement about to be replaced or removed must be exactly the text of its span."""
    if text.code(stmt, indent) != text.cut(*span):
        raise _Cannot
