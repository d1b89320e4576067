"""Source files as bytes: decoded the way Python decodes them, written back byte for byte.

A ``.py`` file is read as bytes and decoded with its declared or detected encoding (a UTF-8
BOM, a PEP 263 ``# -*- coding: NAME -*-`` cookie on line 1 or 2, else UTF-8), exactly as
``tokenize.detect_encoding`` (the interpreter's rule) finds it. Line ends (``\\r\\n``, ``\\r``),
form feeds and every other character stay in the text, so encoding the text again gives the
file's bytes back unchanged; the engine edits the text and only edited lines differ.

A file that does not decode (a stray Latin-1 byte in a UTF-8 file, an unknown codec) is still
read, with U+FFFD in place of each bad byte, so sites can be looked for in it; it is never
written: left untouched, it keeps its bytes; if a patch must edit it, the run stops with
``FILE:LINE: not UTF-8`` (exit 2), LINE being the first undecodable byte's.
"""

from __future__ import annotations

import codecs
import io
import tokenize
from dataclasses import dataclass

BOM = codecs.BOM_UTF8


@dataclass(frozen=True)
class SourceText:
    text: str  # without the BOM
    encoding: str  # a codec name Python knows ("utf-8", "iso8859-1", ...)
    bom: bool = False
    bad_line: int | None = None  # line of the first byte that does not decode
    problem: str = ""  # why it does not decode ("not UTF-8", "unknown encoding 'x'")

    @property
    def decodes(self) -> bool:
        return self.bad_line is None

    def encode(self, text: str) -> bytes:
        """``text`` as this file's bytes (its encoding, its BOM). UnicodeEncodeError if a
        character has no byte in that encoding; ValueError for an undecodable file."""
        if not self.decodes:
            raise ValueError(self.problem)
        return (BOM if self.bom else b"") + text.encode(self.encoding)

    def first_unencodable_line(self, text: str) -> int | None:
        """The line of the first character of ``text`` this file's encoding cannot hold."""
        try:
            text.encode(self.encoding)
            return None
        except UnicodeEncodeError as exc:
            return text.count("\n", 0, exc.start) + 1


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def decode(data: bytes) -> SourceText:
    """Decode a Python source file's bytes (see the module docstring)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        message = str(getattr(exc, "msg", "") or exc)
        if "unknown encoding" in message or "encoding problem" in message:
            # a cookie Python refuses (no such codec, or a BOM with a non-UTF-8 cookie)
            line = 1 if b"coding" in data.split(b"\n", 1)[0] else 2
            return SourceText(data.decode("utf-8", "replace"), "utf-8", False, line, message.split(" for ")[0])
        encoding = "utf-8"  # line 1 or 2 is not UTF-8 and there is no cookie: found below
    bom = encoding == "utf-8-sig"
    body = data[len(BOM):] if bom else data
    codec = "utf-8" if bom else codecs.lookup(encoding).name
    try:
        return SourceText(body.decode(codec), codec, bom)
    except UnicodeDecodeError as exc:
        name = "UTF-8" if codec == "utf-8" else codec
        return SourceText(body.decode(codec, "replace"), codec, bom,
                          _line_of(body, exc.start), f"not {name}")
