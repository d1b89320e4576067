"""The ``def`` and ``class`` headers of a Python text, found by one regex pass (no parse), and
a function's block cut out of the text: what lets the engine's status scan and the gate
check (``astview``) parse only the functions that matter, not the whole file."""

from __future__ import annotations

import bisect
import re
from functools import lru_cache

_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*\(", re.M)


def def_lines(text: str, names: set[str]) -> dict[str, list[int]]:
    """Line numbers of ``def NAME(`` per name, in file order (cheap, no metadata)."""
    out: dict[str, list[int]] = {}
    for m in _DEF.finditer(text):
        if m.group(2) in names:
            out.setdefault(m.group(2), []).append(text.count("\n", 0, m.start()) + 1)
    return out


_HEADER = re.compile(r"^([ \t]*)(?:(class)|(?:async[ \t]+)?def)[ \t]+(\w+)", re.M)


class Defs:
    """Every ``def`` (and ``class``) header of a file with its line, and the function
    blocks cut out of it: one pass over the text, however many blocks are asked for."""

    def __init__(self, text: str) -> None:
        self.text = text
        # (0-based line, indent, is_def, name, offset of the line)
        self.headers: list[tuple[int, int, bool, str, int]] = []
        line, pos = 0, 0
        for m in _HEADER.finditer(text):
            if m.group(2) or _DEF.match(text, m.start()):
                line += text.count("\n", pos, m.start())
                pos = m.start()
                self.headers.append((line, len(m.group(1)), not m.group(2), m.group(3), m.start()))

    def functions(self):
        """(header index, def line 1-based, name) of every ``def``."""
        return [(i, h[0] + 1, h[3]) for i, h in enumerate(self.headers) if h[2]]

    def enclosing(self, i: int) -> list[int]:
        """Header indices of the classes and functions around header ``i``, outermost first."""
        out, want = [], self.headers[i][1]
        for k in range(i - 1, -1, -1):
            if self.headers[k][1] < want:
                out.insert(0, k)
                want = self.headers[k][1]
                if not want:
                    break
        return out

    def around(self, needles) -> set[int]:
        """Header indices of every function or class that may hold one of ``needles``
        (each occurrence counts for the header before it and the ones around that)."""
        offsets = [h[4] for h in self.headers]
        out: set[int] = set()
        for needle in needles:
            at = self.text.find(needle)
            while at != -1:
                i = bisect.bisect_right(offsets, at) - 1
                if i >= 0 and i not in out:
                    out.add(i)
                    out.update(self.enclosing(i))
                at = self.text.find(needle, at + len(needle))
        return out

    def owners(self, i: int) -> list[str]:
        """Enclosing class and function names of header ``i`` (innermost last): the
        qualified name ``index_functions`` would give."""
        out, want = [], self.headers[i][1]
        for _line, indent, _is_def, name, _at in reversed(self.headers[:i]):
            if indent < want:
                out.insert(0, name)
                want = indent
                if not want:
                    break
        return out

    def region(self, i: int) -> tuple[str, int]:
        """The raw text of function ``i`` (from its ``def`` to the first line back at its
        level that is not a comment or the signature's closing bracket) and the 0-based
        line after it."""
        first, width, _d, _n, begin = self.headers[i]
        text = self.text
        indent = text[begin:begin + width]
        body = text.find("\n", begin) + 1 or len(text)
        for m in _low(width).finditer(text, body):
            c = text[m.end()]
            if c == "#" or (c in ")]}" and m.group(0) == indent):
                continue
            return text[begin:m.start()], first + text.count("\n", begin, m.start())
        return text[begin:], first + text.count("\n", begin) + 1

    def block(self, i: int, region: tuple[str, int] | None = None) -> tuple[str, int]:
        """Function ``i`` cut out and dedented, and the 0-based line after its end. Raises
        ValueError when a block cannot be cut cleanly. A block cut short (a line at the
        def's level inside a string or brackets) does not parse."""
        raw, end = region or self.region(i)
        width = self.headers[i][1]
        indent = raw[:width]
        block = []
        for line in raw.split("\n"):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                block.append("")  # a comment, at any indentation, neither ends nor matters
            elif not line.startswith(indent):
                raise ValueError("ragged indentation")
            else:
                block.append(line[width:])
        return "\n".join(block).rstrip() + "\n", end


_LOW: dict[int, re.Pattern] = {}


def _low(width: int) -> re.Pattern:
    """Lines indented ``width`` or less (that begin with something)."""
    if width not in _LOW:
        _LOW[width] = re.compile(r"^[ \t]{0,%d}(?=[^ \t\r\n])" % width, re.M)
    return _LOW[width]


@lru_cache(maxsize=8)
def defs_of(text: str) -> Defs:
    """The headers of ``text``, shared by the engine's status scan and the self-check."""
    return Defs(text)
