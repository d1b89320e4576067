"""The gate evaluator's rules, unit-sized (gates/evaluate.py, gates/values.py).

Every answer the verifier gives ("this gate admits sm120", "still rejects it") rests on the
evaluator's three-valued logic: for one compute capability a condition is True (always), False
(never) or UNKNOWN (depends on settings the evaluator cannot see). The rule that makes that
safe is *soundness*: a decided answer must hold in every world the unknown settings could make.
The property test below checks it against Python itself: the same expression text, evaluated by
``eval`` with a stand-in ``torch`` reporting the capability and every assignment of the unknown
flags. It also checks *completeness where nothing is unknown*: an expression built only of arch
reads is always decided, and decided as Python decides it.
"""

from __future__ import annotations

import ast
import itertools
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forgepatch.gates.evaluate import Evaluator, Scope
from forgepatch.gates.index import Index
from forgepatch.gates.scan import TOKENS, parse_file
from forgepatch.gates.values import UNKNOWN, family_value, kleene_and, kleene_or

# the module the expressions live in: SGLang's predicate shapes, built on the capability
MODULE = '''\
import torch


def is_sm90_supported():
    major, minor = torch.cuda.get_device_capability()
    return (major, minor) == (9, 0)


def is_sm100_supported():
    return torch.cuda.get_device_capability()[0] == 10


def is_sm120_supported():
    return torch.cuda.get_device_capability()[0] == 12
'''
REL = "srt/utils/gatecase.py"
CAPS = [(8, 0), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)]
# unknown settings: the evaluator cannot see them; Python gets every assignment
WORLDS = [SimpleNamespace(a=a, b=b, c=c, n=n)
          for a, b, c, n in itertools.product((False, True), (False, True), (False, True), (0, 2))]


def _index() -> Index:
    return Index([parse_file(REL, MODULE.encode(), TOKENS)])


INDEX = _index()


def evaluate(expr: str, cc: tuple[int, int], strict: bool = False):
    node = ast.parse(expr, mode="eval").body
    return Evaluator(INDEX, cc, None, strict=strict).truth(node, Scope(REL, None, {}))


def python_truth(expr: str, cc: tuple[int, int], world) -> bool:
    cuda = SimpleNamespace(get_device_capability=lambda: cc)
    namespace = {
        "torch": SimpleNamespace(cuda=cuda),
        "is_sm90_supported": lambda: tuple(cc) == (9, 0),
        "is_sm100_supported": lambda: cc[0] == 10,
        "is_sm120_supported": lambda: cc[0] == 12,
        "get_device_sm": lambda: cc[0] * 10 + cc[1],
        "flags": world,
    }
    return bool(eval(expr, namespace))  # noqa: S307 - the reference: Python's own reading of the text


# -- generated expressions -------------------------------------------------------------------
_caps = st.sampled_from(CAPS)
ARCH_ATOMS = st.one_of(
    st.integers(8, 12).map(lambda k: f"torch.cuda.get_device_capability()[0] == {k}"),
    st.integers(8, 12).map(lambda k: f"torch.cuda.get_device_capability()[0] >= {k}"),
    st.integers(0, 3).map(lambda k: f"torch.cuda.get_device_capability()[1] != {k}"),
    _caps.map(lambda c: f"torch.cuda.get_device_capability() >= {c}"),
    _caps.map(lambda c: f"torch.cuda.get_device_capability() == {c}"),
    st.lists(_caps, min_size=1, max_size=3).map(lambda cs: f"torch.cuda.get_device_capability() in ({', '.join(map(str, cs))},)"),
    st.sampled_from(["is_sm90_supported()", "is_sm100_supported()", "is_sm120_supported()"]),
    st.sampled_from([80, 90, 100, 103, 120]).map(lambda n: f"get_device_sm() >= {n}"),
)
UNKNOWN_ATOMS = st.sampled_from(["flags.a", "flags.b", "flags.c", "flags.n > 1"])


def expressions(atoms):
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda p: f"({p[0]} and {p[1]})"),
            st.tuples(inner, inner).map(lambda p: f"({p[0]} or {p[1]})"),
            inner.map(lambda e: f"(not {e})"),
            st.tuples(inner, inner, inner).map(lambda p: f"({p[0]} if {p[1]} else {p[2]})"),
        ),
        max_leaves=8,
    )


@settings(max_examples=300, deadline=None)
@given(expressions(st.one_of(ARCH_ATOMS, UNKNOWN_ATOMS)))
def test_a_decided_answer_holds_in_every_world(expr):
    for cc in CAPS:
        got = evaluate(expr, cc)
        if got is UNKNOWN:
            continue
        assert got in (True, False), (expr, cc, got)
        seen = {python_truth(expr, cc, w) for w in WORLDS}
        assert seen == {got}, f"{expr} on {cc}: evaluator says {got}, Python gives {sorted(seen)}"


@settings(max_examples=300, deadline=None)
@given(expressions(ARCH_ATOMS))
def test_arch_reads_alone_are_always_decided_as_python_decides(expr):
    for cc in CAPS:
        want = python_truth(expr, cc, WORLDS[0])
        assert evaluate(expr, cc) is want, f"{expr} on {cc}: want {want}"
        assert evaluate(expr, cc, strict=True) is want, f"strict: {expr} on {cc}: want {want}"


# -- the rules, one by one --------------------------------------------------------------------
K = [True, False, UNKNOWN]


@pytest.mark.parametrize("a", K)
@pytest.mark.parametrize("b", K)
def test_kleene_tables(a, b):
    """and/or are Kleene's: False absorbs `and`, True absorbs `or`, otherwise UNKNOWN spreads."""
    def completions(x):
        return (True, False) if x is UNKNOWN else (x,)

    for op, python in ((kleene_and, lambda x, y: x and y), (kleene_or, lambda x, y: x or y)):
        outcomes = {python(x, y) for x in completions(a) for y in completions(b)}
        want = outcomes.pop() if len(outcomes) == 1 else UNKNOWN
        assert op(a, b) is want, (op.__name__, a, b)


def test_unknown_does_not_decide_but_a_decided_arch_read_does():
    # flags.a alone: unknown on every arch
    assert {evaluate("flags.a", cc) for cc in CAPS} == {UNKNOWN}
    # `flags.a and is_sm100_supported()` is False off sm10x whatever the flag: the rejection is seen
    assert evaluate("flags.a and is_sm100_supported()", (12, 0)) is False
    assert evaluate("flags.a and is_sm100_supported()", (10, 0)) is UNKNOWN
    # `flags.a or not flags.a` is always True in Python, but Kleene leaves it UNKNOWN: never a wrong "True"
    assert evaluate("flags.a or not flags.a", (12, 0)) is UNKNOWN


@pytest.mark.parametrize("name,cc,want", [
    ("is_sm100_supported", (10, 0), True), ("is_sm100_supported", (10, 3), True),  # the family: major 10
    ("_is_sm100_supported", (12, 0), False), ("is_sm100", (11, 0), False),
    ("is_sm120_supported", (12, 1), True),  # sm121 passes sm120 predicates
    ("is_sm103", (10, 3), True), ("is_sm103", (10, 0), False),  # a minor named: that exact arch
    ("is_blackwell", (10, 0), UNKNOWN), ("use_sm100_path", (10, 0), UNKNOWN),  # not a family name
])
def test_family_names_read_as_sglang_defines_them(name, cc, want):
    assert family_value(name, cc) is want


def test_an_undefined_family_predicate_is_read_by_name_only_when_strict():
    # the apply verifier (strict) reads an undefined `is_sm121_supported()` / `_is_sm103` by
    # its name; the inventory (not strict) does not
    for expr in ("is_sm121_supported()", "_is_sm103"):
        assert {evaluate(expr, cc) for cc in CAPS} == {UNKNOWN}, expr
    assert [evaluate("is_sm121_supported()", cc, strict=True) for cc in CAPS] == [cc == (12, 1) for cc in CAPS]
    assert [evaluate("_is_sm103", cc, strict=True) for cc in CAPS] == [cc == (10, 3) for cc in CAPS]
    # a flag-shaped name called as a function is not guessed: UNKNOWN, never a wrong answer
    assert {evaluate("is_sm103()", cc, strict=True) for cc in CAPS} == {UNKNOWN}
