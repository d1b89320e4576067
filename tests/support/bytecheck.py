"""Byte-exact edits: every byte outside the edited lines of a file is preserved.

``hunks(orig, new)`` aligns the two files' lines as bytes (line ends included, no decoding);
``assert_preserved`` then holds a patched file to its original: the BOM kept, every original
line outside the replaced ones present byte for byte and in order, each replaced line one
the patch may edit (``editable``), at most ``max_replaced`` of them, and every new line ending
the way the file's lines end and encodable in the file's encoding. Nothing here uses
forgepatch's own decoding: the check reads the bytes the tool wrote.
"""

from __future__ import annotations

import codecs
import difflib
import re
from dataclasses import dataclass
from typing import Callable

_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


@dataclass
class Hunk:
    start: int  # 0-based index of the first original line replaced (or where lines are inserted)
    removed: list[bytes]
    added: list[bytes]


def lines(data: bytes) -> list[bytes]:
    """Lines with their ends (\\n, \\r\\n or \\r), as bytes; form feeds stay inside lines."""
    return re.findall(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", data)


def hunks(orig: bytes, new: bytes) -> list[Hunk]:
    a, b = lines(orig), lines(new)
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [Hunk(i1, a[i1:i2], b[j1:j2]) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal"]


def declared_encoding(data: bytes) -> str:
    if data.startswith(codecs.BOM_UTF8):
        return "utf-8"
    for line in lines(data)[:2]:
        m = _COOKIE.match(line)
        if m:
            return codecs.lookup(m.group(1).decode()).name
    return "utf-8"


def newline_of(data: bytes) -> bytes:
    first = re.search(rb"\r\n|\r|\n", data)
    return first.group(0) if first else b"\n"


def assert_preserved(orig: bytes, new: bytes, editable: Callable[[bytes], bool], max_replaced: int,
                     name: str = "") -> list[Hunk]:
    """Assert ``new`` is ``orig`` with only edits of editable lines and added lines."""
    if orig.startswith(codecs.BOM_UTF8):
        assert new.startswith(codecs.BOM_UTF8), f"{name}: BOM dropped"
    found = hunks(orig, new)
    assert found, f"{name}: nothing changed"
    replaced = [line for h in found for line in h.removed]
    assert len(replaced) <= max_replaced, (name, replaced)
    for line in replaced:
        assert editable(line), f"{name}: a line the patch had no reason to touch changed: {line!r}"
    # every original line outside the replaced ones is in the new file, byte for byte, in order
    kept = [ln for i, ln in enumerate(lines(orig))
            if not any(h.start <= i < h.start + len(h.removed) for h in found)]
    it = iter(lines(new))
    assert all(any(ln == got for got in it) for ln in kept), f"{name}: original bytes lost or reordered"
    nl, enc = newline_of(orig), declared_encoding(orig)
    for h in found:
        for line in h.added:
            if line.endswith((b"\r\n", b"\n", b"\r")):
                assert line.endswith(nl) and not line[: -len(nl)].endswith(b"\r"), \
                    f"{name}: an added line ends with {line[-2:]!r}, the file's lines with {nl!r}"
            line.decode(enc)  # UnicodeDecodeError: written in another encoding
    return found
