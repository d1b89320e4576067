"""Opcodes between two sequences (lines, statements) as ``difflib.SequenceMatcher`` gives
them, with the common head and tail cut off first. A patch changes a few places of a file;
SequenceMatcher's longest-match search is quadratic in runs of equal items (a 1 MiB module of
repeated lines took minutes), the trimmed middle is what it has to look at."""

from __future__ import annotations

from collections.abc import Sequence
from difflib import SequenceMatcher


def opcodes(a: Sequence, b: Sequence, autojunk: bool = False) -> list[tuple[str, int, int, int, int]]:
    """``SequenceMatcher(None, a, b, autojunk).get_opcodes()`` for ``a`` and ``b`` with
    their common prefix and suffix matched first."""
    n, m = len(a), len(b)
    head = 0
    while head < n and head < m and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and tail < m - head and a[n - 1 - tail] == b[m - 1 - tail]:
        tail += 1
    ops: list[tuple[str, int, int, int, int]] = [("equal", 0, head, 0, head)] if head else []
    middle = SequenceMatcher(None, a[head:n - tail], b[head:m - tail], autojunk=autojunk).get_opcodes() \
        if (n - tail > head or m - tail > head) else []
    for tag, i1, i2, j1, j2 in middle:
        if tag == "equal" and ops and ops[-1][0] == "equal":
            ops[-1] = ("equal", ops[-1][1], head + i2, ops[-1][3], head + j2)
        else:
            ops.append((tag, head + i1, head + i2, head + j1, head + j2))
    if tail:
        if ops and ops[-1][0] == "equal":
            ops[-1] = ("equal", ops[-1][1], n, ops[-1][3], m)
        else:
            ops.append(("equal", n - tail, n, m - tail, m))
    return ops
