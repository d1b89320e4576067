"""Limits checked before libcst parses a source file: its size, bracket nesting, the size
of one statement and the length of its operator chains. libcst's native parser segfaults on
~2,000 nested brackets and takes minutes on a 20 MB file or a 100,000-term expression; its
Python side (codegen, visitors) recurses once per binary or boolean operator of a chain and
fails past ~500 (``a + b + ...``); these are refused first, as one line ``FILE:LINE: ...``
(bad input, exit 2). No real SGLang file comes near them.

A chain is counted as the parser nests it: operators add up across brackets that hold
them (``a + (b + c)``), a comma starts the next element afresh (``[-1, -1, ...]`` is no
chain), a statement starts from zero."""

from __future__ import annotations

import re

from forgepatch.errors import BadInput
from forgepatch.infra import supervisor

MAX_BYTES = 4 << 20  # the largest SGLang module is ~400 KB
MAX_NESTING = 100  # CPython's own parser stops at 200 nested brackets
MAX_OPERATORS = 10_000  # operators and commas in one logical line (statement)
MAX_CHAIN = 300  # binary / boolean operators chained in one expression (each a level of libcst's recursion)

_TOKENS = re.compile(r"""(?P<str>[rRbBuUfF]{0,2}(?:'''|\"\"\"|'|"))|(?P<open>[(\[{])|(?P<close>[)\]}])|"""
                     r"""(?P<chain>[-+*/%&|^@]|\band\b|\bor\b)|(?P<op>[,<>=])|(?P<nl>\n)|(?P<comment>\#[^\n]*)""")


_PASSED: dict[str, None] = {}  # the last texts found within the limits (a series checks a text once)
_PASSED_KEEP = 16


def check(text: str, where: str) -> None:
    """BadInput (``where:line: ...``) when ``text`` is past a limit. One linear pass (none
    for a text among the last ones that passed: the answer depends on the text alone).
    Notes ``where`` as the file the parser reads next (a native crash past the limits names it)."""
    supervisor.note(where)
    if text in _PASSED:
        return
    _check(text, where)
    _PASSED[text] = None
    while len(_PASSED) > _PASSED_KEEP:
        del _PASSED[next(iter(_PASSED))]


def cache_clear() -> None:
    """Forget the texts that passed (a benchmark's cold run)."""
    _PASSED.clear()


def _check(text: str, where: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass")) if len(text) > MAX_BYTES // 4 else len(text)
    if size > MAX_BYTES:
        raise BadInput(f"{where}:1: file too large to parse ({size >> 20} MiB; at most {MAX_BYTES >> 20} MiB)")
    depth = ops = 0
    chain, chains = 0, [0]  # operators of the chain(s) open at each bracket level; their sum
    line = stmt_line = 1
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKENS.search(text, pos)
        if m is None:
            break
        kind = m.lastgroup
        pos = m.end()
        if kind == "str":
            quote = m.group("str").lstrip("rRbBuUfF")
            end = _string_end(text, pos, quote)
            line += text.count("\n", m.start(), end)
            pos = end
        elif kind == "open":
            depth += 1
            chains.append(0)
            if depth > MAX_NESTING:
                raise BadInput(f"{where}:{line}: brackets nested more than {MAX_NESTING} deep (too deep to parse)")
        elif kind == "close":
            depth = max(0, depth - 1)
            if len(chains) > 1:
                chain -= chains.pop()  # the bracket is one operand of the chain around it
        elif kind == "chain":
            chain += 1
            chains[-1] += 1
            if chain > MAX_CHAIN:
                raise BadInput(f"{where}:{stmt_line}: expression too large to parse "
                               f"(a chain of more than {MAX_CHAIN} binary or boolean operators)")
        elif kind == "op":
            if m.group("op") == ",":  # the next element of a list, call or tuple starts a chain
                chain -= chains[-1]
                chains[-1] = 0
            ops += 1
            if ops > MAX_OPERATORS:
                raise BadInput(f"{where}:{stmt_line}: expression too large to parse "
                               f"(more than {MAX_OPERATORS} operators in one statement)")
        elif kind == "nl":
            line += 1
            if depth == 0 and not text.endswith("\\", 0, m.start()):
                ops = chain = 0
                chains = [0]
                stmt_line = line


def _string_end(text: str, pos: int, quote: str) -> int:
    """The index after the string that starts at ``pos`` (past its opening ``quote``)."""
    if len(quote) == 3:
        end = text.find(quote, pos)
        while end != -1 and _escaped(text, end):
            end = text.find(quote, end + 1)
        return len(text) if end == -1 else end + 3
    i = pos
    while True:
        end = text.find(quote, i)
        nl = text.find("\n", i)
        if end == -1 or (nl != -1 and nl < end and not _escaped(text, nl)):
            return nl if nl != -1 else len(text)  # unterminated: the parser will say so
        if not _escaped(text, end):
            return end + 1
        i = end + 1


def _escaped(text: str, at: int) -> bool:
    k = at - 1
    while k >= 0 and text[k] == "\\":
        k -= 1
    return (at - 1 - k) % 2 == 1
