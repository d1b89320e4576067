"""TOML files read with line numbers: strict UTF-8, ``tomllib`` with every error as
``file:line: ...`` (BadInput), limits on nesting, integers and string length checked before
anything uses the data, and ``key_line``: the line of a key path in the text (for errors a
schema finds after parsing). matrix.toml (``config``) and patch files (``patching.patchset``)
are read through here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from forgepatch.errors import BadInput, located

_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.\"' -")


def _line_keys(line: str) -> tuple[str, str] | None:
    """``("table", "a.b")`` for a ``[a.b]``/``[[a.b]]`` header, ``("key", "a.b")`` for an
    ``a.b = ...`` assignment, else None. A plain scan, linear in the line (the regexes this
    replaces backtracked quadratically on a long run of spaces: 102 s for 200k)."""
    if line.startswith("["):
        inner = line[2:] if line.startswith("[[") else line[1:]
        end = inner.find("]")
        if end <= 0 or inner[end:].rstrip("]").strip():
            return None
        name = inner[:end].strip()
        return ("table", name) if name else None
    key, eq, _ = line.partition("=")
    key = key.strip()
    # a quoted key may hold escapes and any character beyond ASCII ("\u00e9", "é")
    if not eq or not key or not all(c in _KEY_CHARS or c == "\\" or c > "\x7f" for c in key):
        return None
    return ("key", key)


def key_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """Best-effort line of a key path in TOML text: the key itself, else the deepest
    enclosing table header or dotted key that is a prefix of it."""
    keys = [str(k) for k in loc if not isinstance(k, int)]

    def split(dotted: str) -> list[str]:
        """Dotted keys split at dots outside quotes ([pins."v0.5.23".packages.flashinfer]),
        each as TOML reads it (a basic string's escapes decoded: "\\u00e9" is é)."""
        return [_bare_key(p.strip()) for p in re.findall(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'|[^.]+', dotted)]

    best, best_len, table = None, 0, []
    for no, raw in enumerate(text.splitlines(), 1):
        found = _line_keys(raw.split("#", 1)[0].strip())
        if found is None:
            continue
        if found[0] == "table":
            table = full = split(found[1])
        else:
            full = table + split(found[1])
        if full == keys:
            return no
        if keys[: len(full)] == full and len(full) > best_len:
            best, best_len = no, len(full)
    return best


def _bare_key(piece: str) -> str:
    """One key of a dotted key as written (bare, 'literal' or "basic") as TOML reads it."""
    if piece[:1] == "'" and piece[-1:] == "'" and len(piece) > 1:
        return piece[1:-1]
    if piece[:1] == '"' and piece[-1:] == '"' and len(piece) > 1:
        try:
            return tomllib.loads(f"k = {piece}")["k"]
        except tomllib.TOMLDecodeError:
            return piece[1:-1]
    return piece


MAX_DEPTH = 24  # tables/arrays nested deeper than this are refused (no config needs it)


def decode_utf8(path: Path, raw: bytes) -> str:
    """The file's text; ``file:line: not UTF-8 (byte 0xE9 at column 7)`` (BadInput) otherwise."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise BadInput(located(path, line, f"not UTF-8 (byte 0x{raw[exc.start]:02X} at column {col})")) from None


def _nesting_line(text: str) -> int | None:
    """The first line where brackets and braces nest deeper than MAX_DEPTH (strings skipped
    roughly: good enough to point at the culprit). One pass over the text, no regex."""
    depth = 0
    for no, line in enumerate(text.splitlines(), 1):
        head = line.lstrip().lstrip("[")
        if head.split("=", 1)[0].split("]", 1)[0].count(".") >= MAX_DEPTH:  # a dotted header or key
            return no
        quote, escaped = "", False
        for ch in line:
            if quote:
                if escaped:
                    escaped = False
                elif ch == "\\" and quote == '"':
                    escaped = True
                elif ch == quote:
                    quote = ""
                continue
            if ch == "#":
                break
            if ch in "\"'":
                quote = ch
            elif ch in "[{":
                depth += 1
                if depth > MAX_DEPTH:
                    return no
            elif ch in "]}":
                depth = max(0, depth - 1)
    return None


MAX_INT = 2**63 - 1  # TOML's own range (a 64-bit signed integer); no setting needs more
MAX_STRING = 65536  # characters in one string value (a patch's longest example is far shorter)


def _first_bad(data: Any) -> tuple[tuple[Any, ...], str] | None:
    """(key path, why) of the first value nested deeper than MAX_DEPTH (``deep``), an integer
    outside TOML's 64-bit range (``number``) or a string longer than MAX_STRING (``string``)."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack:
        value, loc = stack.pop()
        if len(loc) > MAX_DEPTH:
            return loc, "deep"
        if isinstance(value, dict):
            stack.extend((v, loc + (k,)) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((v, loc + (i,)) for i, v in reversed(list(enumerate(value))))
        elif isinstance(value, int) and not isinstance(value, bool) and not -MAX_INT - 1 <= value <= MAX_INT:
            return loc, "number"
        elif isinstance(value, str) and len(value) > MAX_STRING:
            return loc, "string"
    return None


def _huge_number_line(text: str) -> tuple[int | None, str]:
    """(line, key) of the first integer literal too long for Python to read (tomllib's
    ValueError names neither)."""
    m = re.search(r"[0-9_]{4000,}", text)
    if m is None:
        return None, ""
    no = text.count("\n", 0, m.start()) + 1
    line = text.splitlines()[no - 1]
    found = _line_keys(line.split("#", 1)[0].strip())
    return no, (found[1].strip("\"'") if found and found[0] == "key" else "")


def parse_toml(path: Path, text: str) -> dict[str, Any]:
    """``tomllib.loads`` with errors as ``file:line: invalid TOML: ...`` (BadInput); values
    nested deeper than MAX_DEPTH, integers beyond 64 bits and strings longer than MAX_STRING
    are refused the same way (``file:line: key: number too large``)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        line = int(m.group(1)) if m else (len(text.rstrip("\n").split("\n")) if "end of document" in str(exc) else None)
        raise BadInput(located(path, line, f"invalid TOML: {exc}")) from None
    except RecursionError:
        raise BadInput(located(path, _nesting_line(text), f"invalid TOML: nested more than {MAX_DEPTH} levels deep")) from None
    except ValueError:  # an integer literal of more digits than int() reads
        line, key = _huge_number_line(text)
        raise BadInput(located(path, line, f"{key[:80] or 'a value'}: number too large")) from None
    bad = _first_bad(data)
    if bad is not None:
        loc, why = bad
        key = ".".join(str(k) for k in loc if not isinstance(k, int))
        if why == "deep":
            raise BadInput(located(path, key_line(text, loc[:MAX_DEPTH]) or _nesting_line(text),
                                   f"{key[:80]}: nested more than {MAX_DEPTH} levels deep"))
        msg = "number too large" if why == "number" else f"string too long (more than {MAX_STRING} characters)"
        raise BadInput(located(path, key_line(text, loc), f"{key[:80] or '(top level)'}: {msg}"))
    return data


def read_toml(path: Path, what: str = "config") -> tuple[str, dict[str, Any]]:
    """Read, decode (strict UTF-8) and parse a TOML file: (text, data); BadInput on any error."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read {what}: {exc.strerror}") from None
    text = decode_utf8(path, raw)
    return text, parse_toml(path, text)
