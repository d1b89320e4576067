"""Property tests for the arch-gate codemod on generated gate conditions (hypothesis)."""

from __future__ import annotations

import ast

from hypothesis import given, settings
from hypothesis import strategies as st

from forgepatch.arch import get_arch
from forgepatch.patching.engine import run_patches
from forgepatch.patching.patchset import build_patch
from forgepatch.patching.codemods.arch_gate import ArchGateCodemod
from forgepatch.patching.trees import MemoryTree
from tests.support import astcheck

PATCH = build_patch({
    "id": "gen", "summary": "generated", "arches": ["sm120"],
    "sites": [{"name": "gate", "functions": ["gated"], "markers": ["fusion_enabled"]}],
}, ArchGateCodemod)

UTILS = "def is_sm90_supported(): ...\ndef is_sm100_supported(): ...\ndef is_sm120_supported(): ...\n"
PLATFORM = "def get_platform(): ...\nFLAGS = ['is_sm90', 'is_sm100', 'is_sm120']\n"
HEADER = (
    "from sglang.srt.utils import is_cuda, is_sm90_supported, is_sm100_supported\n"
    "from sglang.srt.runtime_context import get_platform\n\n"
    "_is_cuda = is_cuda()\n"
    "_is_sm90_supported = _is_cuda and is_sm90_supported()\n"
    "_is_sm100_supported = _is_cuda and is_sm100_supported()\n"
)

IDIOMS = {
    "constant": "_is_{}_supported",
    "call": "is_{}_supported()",
    "attribute": "get_platform().is_{}",
}
families = st.sampled_from(["sm90", "sm100"])
idioms = st.sampled_from(sorted(IDIOMS))
others = st.sampled_from(["view.nnodes == 1", "batch_size > 0", "not is_dp()", "x.tp_size > 1"])


@st.composite
def gate(draw):
    """A pure disjunction of 2-3 predicates in one idiom, a mixed one, or a lone predicate."""
    idiom = draw(idioms)
    kind = draw(st.sampled_from(["pure", "mixed", "lone"]))
    preds = [IDIOMS[idiom].format(f) for f in draw(st.lists(families, min_size=2, max_size=3, unique=True))]
    if kind == "pure":
        return kind, "(" + " or ".join(preds) + ")"
    if kind == "mixed":
        return kind, "(" + draw(others) + " or " + preds[-1] + ")"
    return kind, preds[0]


@st.composite
def module(draw):
    g_kind, g = draw(gate())
    extra = draw(st.lists(others, max_size=2))
    cond = " and ".join([g, "fusion_enabled"] + extra)
    layout = draw(st.sampled_from(["return", "if"]))
    comment = draw(st.sampled_from(["", "  # keep me"]))
    if layout == "return":
        body = f"    return (\n        {cond}{comment}\n    )\n"
    else:
        body = f"    if {cond}:{comment}\n        return True\n    return False\n"
    return g_kind, HEADER + "\n\ndef gated(batch_size, view, x, fusion_enabled):\n" + body


def apply(src: str) -> tuple[str, object]:
    files = {"srt/layers/mod.py": src, "srt/utils.py": UTILS, "srt/runtime_context.py": PLATFORM}
    res = run_patches(MemoryTree(files, pristine=True), [PATCH], get_arch("sm120"), None)
    return res.changed.get("srt/layers/mod.py", src), res


@settings(max_examples=60, deadline=None)
@given(module())
def test_only_gate_expressions_change_and_apply_is_idempotent(case):
    kind, src = case
    out, res = apply(src)
    compile(out, "mod.py", "exec")
    # removing what the patch adds gives back the original AST: nothing else changed
    assert astcheck.strip_family(out, "sm120") == astcheck.strip_family(src, "sm120")
    widened = astcheck.gates_accepting(out, "sm120")
    if kind == "pure":
        assert [fn for fn, _ in widened] == ["gated"]
        assert res.patches[0].status.value == "applied"
    else:  # mixed and lone gates are never widened
        assert widened == [] and out == src
        assert res.patches[0].status.value == "drift"
    # comments and layout survive: every original line is still there, in order
    kept = [ln for ln in src.splitlines() if "_supported" not in ln and "is_sm" not in ln]
    assert all(ln in out.splitlines() for ln in kept)
    # idempotence: a second run changes nothing and reports already-applied
    again, res2 = apply(out)
    assert again == out
    if kind == "pure":
        assert res2.patches[0].status.value == "absorbed-upstream"


@settings(max_examples=30, deadline=None)
@given(module())
def test_new_names_resolve(case):
    kind, src = case
    out, _ = apply(src)
    tree = ast.parse(out)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    for name in ("_is_sm120_supported", "is_sm120_supported"):
        if name in used:
            assert astcheck.module_binds(out, name), name
