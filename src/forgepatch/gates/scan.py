"""Reading an SGLang tree fast enough to inventory every arch gate in about a second.

Parsing all of a release (4,700 files, 65 MB) with the stdlib ``ast`` takes several seconds
and libcst minutes, and almost nothing in it is an arch gate. So:

1. every ``.py`` file is read as bytes and kept only if it contains an arch token
   (:data:`TOKENS`, plain substring tests) or the name of a predicate found in the tree;
2. a kept file is cut into top-level blocks at lines that start in column 0 (a class of
   more than :data:`CLASS_SPLIT` bytes into its members, at the body's indentation), and
   only the blocks holding a token are parsed. A block that does not parse on its own (a cut
   inside a multi-line string, a decorator) is joined with the next one until it does, so
   every tree handed on is what ``ast.parse`` makes of real source, at its real line numbers.
"""

from __future__ import annotations

import ast
import bisect
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

TOKENS = (b"capabilit", b"is_sm", b"blackwell", b"hopper", b"major_versions", b"get_device_sm")
CLASS_SPLIT = 4 << 10  # bigger classes are parsed member by member
FUNC_SPLIT = 4 << 10  # bigger functions are parsed statement by statement
_TOP = re.compile(rb"\n(?=[^\s#)\]}])")  # a literal first character lets re skip ahead fast
_CONTINUATIONS = (b"else", b"elif", b"except", b"finally")


@dataclass
class Block:
    """One parsed piece of a file: a top-level statement or a class member."""

    nodes: list[ast.stmt]
    cls: str | None = None  # enclosing class of a member block
    cls_line: int = 0
    line_offset: int = 0  # real line = node.lineno + line_offset
    func: str | None = None  # set when nodes are some statements of this function's body


@dataclass
class SourceFile:
    rel: str  # path inside the package, e.g. "srt/utils/common.py"
    data: bytes
    blocks: list[Block] = field(default_factory=list)
    error: str | None = None


def read_tree(package: Path) -> dict[str, bytes]:
    """Every ``.py`` file under the package directory, by relative path (sorted walk)."""
    out: dict[str, bytes] = {}
    root = str(package)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, "rb") as fh:
                    out[os.path.relpath(path, root).replace(os.sep, "/")] = fh.read()
    return out


def candidates(files: dict[str, bytes], keys: tuple[bytes, ...] = TOKENS, whole_words: bool = False) -> list[str]:
    """Files holding one of ``keys`` (as substrings, or as whole identifiers)."""
    if not whole_words:
        return [rel for rel, data in files.items() if any(k in data for k in keys)]
    wanted = set(keys)
    if not all(_IDENT_RUN.fullmatch(k) for k in wanted):  # a key that is no identifier: search it
        return [rel for rel, data in files.items() if any(_word_at(data, k, 0, len(data)) >= 0 for k in keys)]
    # a whole identifier is a maximal run of identifier bytes: every other byte becomes a
    # space and the file's runs are its words. One C pass per file, whatever the number of
    # names (a search per name costs a pass over the tree each: 33 names, 3x slower)
    return [rel for rel, data in files.items() if not wanted.isdisjoint(data.translate(_WORDS).split())]


_IDENT_RUN = re.compile(rb"[A-Za-z0-9_\x80-\xff]+")


def _ident(byte: int) -> bool:
    return byte == 95 or 48 <= byte <= 57 or 65 <= byte <= 90 or 97 <= byte <= 122 or byte >= 128


_WORDS = bytes(b if _ident(b) else 32 for b in range(256))  # identifier bytes kept, the rest spaces


def _word_at(data: bytes, word: bytes, begin: int, end: int) -> int:
    """Offset of ``word`` as a whole identifier in data[begin:end], or -1."""
    pos = data.find(word, begin, end)
    while pos >= 0:
        after = pos + len(word)
        if (pos == 0 or not _ident(data[pos - 1])) and (after >= len(data) or not _ident(data[after])):
            return pos
        pos = data.find(word, pos + 1, end)
    return -1


def parse_file(rel: str, data: bytes, keys: tuple[bytes, ...], whole_words: bool = False) -> SourceFile:
    """Parse the blocks of ``data`` that contain one of ``keys``. Line numbers of a block's
    nodes are relative: add ``Block.line_offset``."""
    src = SourceFile(rel, data)
    hits = _hits(data, keys, 0, len(data), whole_words)
    if not hits:
        return src
    strings = _triple_quoted(data)
    starts = [0] + [m.start() + 1 for m in _TOP.finditer(data)
                    if not data.startswith(_CONTINUATIONS, m.start() + 1) and not _inside(strings, m.start() + 1)]
    try:
        for begin, end in _selected(starts, hits, len(data)):
            src.blocks += _parse_range(data, begin, end, starts, len(data), None, (keys, whole_words))
    except (SyntaxError, ValueError):
        try:  # a cut the string scan missed: parse the whole file once
            src.blocks = _whole(data, hits)
        except SyntaxError as exc:
            src.blocks, src.error = [], f"{rel}:{exc.lineno}: {exc.msg}"
    return src


@functools.lru_cache(maxsize=4)  # asked once per split class or function of the same file
def _triple_quoted(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of triple-quoted strings, found by pairing the quotes in order."""
    regions, never = [], len(data) + 1  # ``never``: that quote does not occur again

    def first(quote: bytes, pos: int) -> int:
        at = data.find(quote, pos)
        return never if at < 0 else at

    nxt = {b'"""': first(b'"""', 0), b"'''": first(b"'''", 0)}
    while True:
        at, quote = min((at, q) for q, at in nxt.items())
        if at == never:
            return regions
        close = data.find(quote, at + 3)
        if close < 0:
            return regions
        regions.append((at, close + 3))
        pos = close + 3
        for q in nxt:
            if nxt[q] < pos:  # a quote that did not occur is not searched for again
                nxt[q] = first(q, pos)


def _inside(regions: list[tuple[int, int]], pos: int) -> bool:
    i = bisect.bisect_right(regions, (pos, len(b"")) ) - 1
    return i >= 0 and regions[i][0] < pos < regions[i][1]


def _whole(data: bytes, hits: list[int]) -> list[Block]:
    """The top-level statements (class members for classes) of the whole file that hold a hit."""
    lines = sorted({_line_of(data, h) for h in hits})
    blocks = []
    for node in ast.parse(data).body:
        if not any(node.lineno <= ln <= node.end_lineno for ln in lines):
            continue
        if isinstance(node, ast.ClassDef):
            members = [m for m in node.body if any(_first_line(m) <= ln <= m.end_lineno for ln in lines)]
            blocks.append(Block(members or [node], node.name, node.lineno) if members else Block([node]))
        else:
            blocks.append(Block([node]))
    return blocks


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", None)
    return decorators[0].lineno if decorators else node.lineno


def _hits(data: bytes, keys: tuple[bytes, ...], begin: int, end: int, whole_words: bool = False) -> list[int]:
    out = set()
    for key in keys:
        pos = _word_at(data, key, begin, end) if whole_words else data.find(key, begin, end)
        while pos >= 0:
            out.add(pos)
            pos = _word_at(data, key, pos + 1, end) if whole_words else data.find(key, pos + 1, end)
    return sorted(out)


def _selected(starts: list[int], hits: list[int], limit: int) -> list[tuple[int, int]]:
    chosen = sorted({bisect.bisect_right(starts, pos) - 1 for pos in hits})
    return [(starts[i], starts[i + 1] if i + 1 < len(starts) else limit) for i in chosen if i >= 0]


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _parse_range(data: bytes, begin: int, end: int, starts: list[int], limit: int,
                 cls: tuple[str, int] | None, keys: tuple[tuple[bytes, ...], bool]) -> list[Block]:
    """Parse data[begin:end] (a class member at its own indentation when ``cls`` is given);
    a decorator line is joined with what it decorates."""
    member = cls is not None
    while data.startswith(b"@", begin + (len(_indent(data, begin)) if member else 0)) and end < limit:
        nxt = bisect.bisect_right(starts, end)
        end = starts[nxt] if nxt < len(starts) and starts[nxt] <= limit else limit
        if _first_code(data, begin, end):
            break
    if not member and end - begin > CLASS_SPLIT and (header := _class_header(data, begin, end)):
        return _split_class(data, begin, end, header, keys)
    if end - begin > FUNC_SPLIT and (header := _def_header(data, begin, end)):
        return _split_function(data, begin, end, header, cls, keys)
    # line numbers stay relative to the chunk (Block.line_offset): shifting them, or padding
    # the chunk with newlines, costs more than the parse
    chunk, line = data[begin:end], _line_of(data, begin)
    if member:
        return [Block(ast.parse(b"if 1:\n" + chunk).body[0].body, cls[0], cls[1], line - 2)]
    return [Block(ast.parse(chunk).body, None, 0, line - 1)]


_DEF = re.compile(rb"[ \t]*(?:@[^\n]*\n[ \t]*)*(?:async[ \t]+)?def[ \t]+(\w+)")
_ASSIGNED = re.compile(rb"^[ \t]*([A-Za-z_][\w \t,()\[\]]*?)[ \t]*(?::[^=\n]*)?=(?!=)", re.M)


def _def_header(data: bytes, begin: int, end: int) -> tuple[str, int, int] | None:
    m = _DEF.match(data, begin)
    return _header_end(data, m, end) if m else None


def _split_function(data: bytes, begin: int, end: int, header: tuple[str, int, int],
                    cls: tuple[str, int] | None, keys: tuple[tuple[bytes, ...], bool]) -> list[Block]:
    """The statements of a big function's body that hold a key, and those that use a name
    one of them assigns (``major, minor = get_device_capability()`` ... ``if major >= 9``),
    parsed one by one at their own indentation."""
    name, _line, body_start = header
    starts = _member_starts(data, body_start, end)
    if not starts:
        raise SyntaxError(f"def {name}: no indented body found", ("", _line, 0, ""))
    chosen: set[int] = set()
    words, whole = keys
    hits = _hits(data, words, body_start, end, whole)
    while hits:
        fresh = {bisect.bisect_right(starts, pos) - 1 for pos in hits} - chosen - {-1}
        if not fresh:
            break
        chosen |= fresh
        names = set()
        for i in fresh:  # a simple assignment whose value holds the hit binds arch-derived names
            stmt_end = starts[i + 1] if i + 1 < len(starts) else end
            m = _ASSIGNED.match(data, starts[i], stmt_end)
            if m and any(m.end() <= h < stmt_end for h in hits):
                names.update(n for n in re.findall(rb"[A-Za-z_]\w*", m.group(1)) if n not in (b"self", b"cls"))
        hits = _hits(data, tuple(sorted(names)), body_start, end, True) if names else []
    blocks = []
    for i in sorted(chosen):
        b, e = starts[i], starts[i + 1] if i + 1 < len(starts) else end
        line = _line_of(data, b)
        nodes = ast.parse(b"if 1:\n" + data[b:e]).body[0].body
        blocks.append(Block(nodes, cls[0] if cls else None, cls[1] if cls else 0, line - 2, func=name))
    return blocks


def _member_starts(data: bytes, body_start: int, end: int) -> list[int]:
    """Statement starts at the indentation of the first body line after ``body_start``."""
    while body_start < end and not data[body_start:data.find(b"\n", body_start)].split(b"#", 1)[0].strip():
        nl = data.find(b"\n", body_start)
        if nl < 0:
            return []
        body_start = nl + 1  # blank and comment lines before the first statement
    indent = _indent(data, body_start)
    if not indent:
        return []
    strings = _triple_quoted(data)
    member = re.compile(rb"^" + re.escape(indent) + rb"(?![\s#)\]}]|else\b|elif\b|except\b|finally\b|case\b)", re.M)
    starts = [m.start() for m in member.finditer(data, body_start, end) if not _inside(strings, m.start())]
    if not starts or starts[0] != body_start:
        starts.insert(0, body_start)
    return starts


_CLASS = re.compile(rb"(?:@[^\n]*\n)*class\s+(\w+)")


def _class_header(data: bytes, begin: int, end: int) -> tuple[str, int, int] | None:
    """(name, line, body offset) of a class statement starting at ``begin``, found from its
    text: the body starts after the first line ending with ``:`` (comments aside). A wrong
    guess fails to parse and the file is then parsed whole."""
    m = _CLASS.match(data, begin)
    return _header_end(data, m, end) if m else None


def _header_end(data: bytes, m: re.Match, end: int) -> tuple[str, int, int] | None:
    pos = m.end()
    while pos < end:
        nl = data.find(b"\n", pos)
        nl = end if nl < 0 or nl > end else nl
        if data[pos:nl].split(b"#", 1)[0].rstrip().endswith(b":"):
            return m.group(1).decode(), _line_of(data, m.start(1)), min(nl + 1, end)
        pos = nl + 1
    return None


def _indent(data: bytes, offset: int) -> bytes:
    line_end = data.find(b"\n", offset)
    line = data[offset:line_end if line_end >= 0 else len(data)]
    return line[: len(line) - len(line.lstrip(b" \t"))]


def _first_code(data: bytes, begin: int, end: int) -> bool:
    """Does data[begin:end] hold a line that is not a decorator (the decorated statement)?"""
    for line in data[begin:end].splitlines():
        text = line.strip()
        if text and not text.startswith((b"@", b"#")):
            return True
    return False


def _split_class(data: bytes, begin: int, end: int, header: tuple[str, int, int],
                 keys: tuple[tuple[bytes, ...], bool]) -> list[Block]:
    """The members of a big class that hold a key, parsed one by one (at their own
    indentation); the class name and line are kept as the members' context."""
    name, line, body_start = header
    starts = _member_starts(data, body_start, end)
    if not starts:
        raise SyntaxError(f"class {name}: no indented body found", ("", line, 0, ""))
    blocks: list[Block] = []
    for b, e in _selected(starts, _hits(data, keys[0], starts[0], end, keys[1]), end):
        blocks += _parse_range(data, b, e, starts, end, (name, line), keys)
    return blocks
