"""Literal pre-checks for line regexes: a line that holds none of a pattern's required literals
cannot match it, so the regex is not run (Python's ``re`` scans every position of an
alternation; a substring test is one C scan). Stdlib only (it runs inside images too).

``needles(pattern)`` reads the pattern's parse tree: for each top-level alternative, a literal
run every match of it contains (or, for a mandatory alternation inside it, one literal per
branch). None means "no safe pre-check" (an alternative without such a literal, flags it cannot
honour, a parser it does not know): the regex is then always run, so a pre-check can only skip
work, never a match (tests/test_triage_real_logs.py checks it on every real log line).
"""

from __future__ import annotations

import functools
import re

try:  # the parser behind re.compile (Python 3.11+: re._parser; before: sre_parse)
    from re import _parser as _sre  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older interpreters
    import sre_parse as _sre  # type: ignore[no-redef]

_MIN = 3  # shorter runs would pass almost every line


def _plain_group(op, arg) -> bool:
    return str(op) == "SUBPATTERN" and len(arg) == 4 and not arg[1] and not arg[2]


def _branches(items) -> list[list] | None:
    """The alternatives of a sequence that is one alternation, else None."""
    return [list(a) for a in items[0][1][1]] if len(items) == 1 and str(items[0][0]) == "BRANCH" else None


def _literal(alt: list) -> str | None:
    return "".join(chr(a) for _, a in alt) if all(str(o) == "LITERAL" for o, _ in alt) else None


def _candidates(items) -> list[tuple[str, ...]]:
    """Sets of literals of which every match of the sequence ``items`` contains at least one: a
    plain literal run is a set of one; a mandatory alternation gives one literal per alternative
    (joined to the run before it when every alternative is a plain literal)."""
    found: list[tuple[str, ...]] = []
    cur: list[str] = []

    def close() -> None:
        if cur:
            found.append(("".join(cur),))
            cur.clear()

    for op, arg in items:
        name = str(op)
        alts = None
        if name == "LITERAL":
            cur.append(chr(arg))
            continue
        if name == "BRANCH":
            alts = [list(a) for a in arg[1]]
        elif _plain_group(op, arg):
            inner = list(arg[3])
            if (lit := _literal(inner)) is not None:
                cur.append(lit)
                continue
            alts = _branches(inner)
            if alts is None:
                close()
                found.extend(_candidates(inner))
                continue
        if alts is None:  # anything else (a class, a repeat, an anchor, a flagged group) ends the run
            close()
            continue
        lits = [_literal(a) for a in alts]
        if cur and all(lit is not None for lit in lits):
            found.append(tuple("".join(cur) + lit for lit in lits))  # type: ignore[operator]
            cur.clear()
            continue
        close()
        if (choice := _choose_all(alts)) is not None:
            found.append(choice)
    close()
    return found


def _best(items) -> tuple[str, ...] | None:
    ok = [c for c in _candidates(items) if min(map(len, c)) >= _MIN]
    return max(ok, key=lambda c: (min(map(len, c)), -len(c))) if ok else None


def _choose_all(alts: list[list]) -> tuple[str, ...] | None:
    """One literal set covering every alternative, or None when one has none."""
    out: list[str] = []
    for alt in alts:
        best = _best(alt)
        if best is None:
            return None
        out.extend(best)
    return tuple(out)


@functools.lru_cache(maxsize=512)
def needles(pattern: str) -> tuple[str, ...] | None:
    """Literals of which every match of ``pattern`` contains at least one (see the module), or
    None when no safe set exists."""
    try:
        tree = _sre.parse(pattern)
    except Exception:  # noqa: BLE001 - an unknown parser: no pre-check
        return None
    if tree.state.flags & ~(re.UNICODE | re.IGNORECASE):
        return None
    items = list(tree)
    found = _choose_all(_branches(items) or [items])
    return tuple(sorted(set(found))) if found else None


class Prefilter:
    """The pre-checks of several patterns at once: ``possible(line)`` lists, per pattern, whether
    the line can match it. Each distinct literal is tested once per line (most lines hold none)."""

    def __init__(self, patterns: list[str]):
        self._sets: list[frozenset[str] | None] = []
        exact: set[str] = set()
        folded: set[str] = set()
        for p in patterns:
            found = needles(p)
            if found is None:
                self._sets.append(None)
                continue
            if "(?i" in p:  # case-insensitive somewhere: compare lower-cased (a superset of the matches)
                found = tuple("\0" + n.lower() for n in found)
                folded.update(n[1:] for n in found)
            else:
                exact.update(found)
            self._sets.append(frozenset(found))
        self._exact = tuple(sorted(exact))
        self._folded = tuple(sorted(folded))
        self._always = [s is None for s in self._sets]

    def possible(self, line: str) -> list[bool]:
        present = {n for n in self._exact if n in line}
        if self._folded:
            lower = line.lower()
            present.update("\0" + n for n in self._folded if n in lower)
        if not present:
            return self._always
        return [s is None or not s.isdisjoint(present) for s in self._sets]
