"""linediff.opcodes: SequenceMatcher's opcodes with the common ends cut first (a file of
repeated lines made the edit set and the self-check's line map quadratic: a 1 MiB module
took minutes). Properties over random line sequences, and the speed on the shape that hung."""

from __future__ import annotations

import time
from difflib import SequenceMatcher

from hypothesis import given, settings
from hypothesis import strategies as st

from forgepatch.patching.linediff import opcodes

LINES = st.lists(st.sampled_from(["a", "b", "c", "", "x = 1"]), max_size=30)


@settings(max_examples=400, deadline=None)
@given(LINES, LINES, st.booleans())
def test_opcodes_cover_both_sides_and_turn_a_into_b(a, b, autojunk):
    ops = opcodes(a, b, autojunk)
    i = j = 0
    out: list[str] = []
    for tag, i1, i2, j1, j2 in ops:
        assert (i1, j1) == (i, j) and i1 <= i2 and j1 <= j2
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2] and i2 > i1
        else:
            assert tag in ("replace", "delete", "insert") and (i2 > i1 or j2 > j1)
        out += b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b)) and out == b
    assert all(x[0] != "equal" or y[0] != "equal" for x, y in zip(ops, ops[1:])), ops  # equal runs merged


@settings(max_examples=200, deadline=None)
@given(LINES, LINES)
def test_without_common_ends_it_is_sequence_matcher(a, b):
    if (a and b) and (a[0] == b[0] or a[-1] == b[-1]):
        return
    assert opcodes(a, b) == SequenceMatcher(None, a, b, autojunk=False).get_opcodes()


def test_an_edit_at_the_top_of_a_file_of_repeated_lines_is_linear():
    body = ["y_1 = 2"] * 60_000
    a, b = ["if sm90:", "    pass", *body], ["if sm90 or sm120:", "    pass", *body]
    start = time.monotonic()
    ops = opcodes(a, b)
    assert time.monotonic() - start < 1.0
    assert ops == [("replace", 0, 1, 0, 1), ("equal", 1, len(a), 1, len(b))]
