"""Which gates are the feature's, outside the patch's own sites: on real release sources
(the shipped sm120 patch on 0.5.10 and 0.5.23), a module upstream could add, written two
ways — one the evaluator must hold to admitting sm120 (exit 1 while it rejects), one it must
leave alone (a dispatch, an unrelated backend's check, a test module, a keyword name).
Each pair differs in the one thing the rule decides by, so a rule that says "ok" on
everything, or "incomplete" on everything, fails one side."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from forgepatch.arch import get_arch
from forgepatch.patching.engine import run_patches
from forgepatch.patching.evaluation import COMMON_MARKER_FILES, feature_scope
from forgepatch.patching.patchset import load_patches
from forgepatch.patching.trees import MemoryTree
from forgepatch.paths import SHIPPED_PATCHES
from tests.test_apply_refactors import REAL, _apply_real, _real_files

HEAD = ("from sglang.srt.utils import is_sm90_supported, is_sm100_supported\n\n"
        "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048\n\n\n")

# (rule, module path, code the evaluator must hold to the feature, code it must leave alone)
PAIRS = {
    "an exit that rejects vs a branch that returns what the arch selects": (
        "srt/layers/flashinfer_ar_select.py",
        "def flashinfer_allreduce_workspace(hidden: int):\n"
        "    if hidden > FUSE_ALLREDUCE_MAX_BATCH_SIZE:\n        return None\n"
        "    if not (is_sm90_supported() or is_sm100_supported()):\n        raise ValueError('needs sm90/sm100')\n"
        "    return hidden * 2\n",
        "def flashinfer_allreduce_backend_name(batch: int) -> str:\n"
        "    if batch > FUSE_ALLREDUCE_MAX_BATCH_SIZE:\n        return 'none'\n"
        "    if is_sm90_supported() or is_sm100_supported():\n        return 'mnnvl'\n"
        "    return 'trtllm'\n"),
    "an exit on the feature's path vs one inside another backend's branch": (
        "srt/layers/flashinfer_ar_ws.py",
        "def flashinfer_allreduce_workspace(hidden: int, backend: str):\n"
        "    if not (is_sm90_supported() or is_sm100_supported()):\n        return 0\n"
        "    return hidden * FUSE_ALLREDUCE_MAX_BATCH_SIZE\n",
        "def flashinfer_allreduce_workspace(hidden: int, backend: str):\n"
        "    if backend == 'cutedsl':\n"
        "        if not (is_sm90_supported() or is_sm100_supported()):\n            return 0\n"
        "    return hidden * FUSE_ALLREDUCE_MAX_BATCH_SIZE\n"),
    "a marker read vs a marker that is only a call's keyword name": (
        "srt/layers/flashinfer_ar_kw.py",
        "def build_fused_kernel(args):\n"
        "    if (is_sm90_supported() or is_sm100_supported()) and args.enable_flashinfer_allreduce_fusion:\n"
        "        return make(args)\n"
        "    return None\n",
        "def build_fused_kernel(args):\n"
        "    if (is_sm90_supported() or is_sm100_supported()) and make_kernel(enable_flashinfer_allreduce_fusion=False):\n"
        "        return 1\n"
        "    return None\n"),
}


def _findings(res, rel: str) -> list[str]:
    return [c.status for p in res.patches for c in p.checks if c.file == rel and c.status != "ok"]


@pytest.mark.parametrize("layout", sorted(REAL))
@pytest.mark.parametrize("rule", sorted(PAIRS))
def test_a_new_modules_gate_is_the_features_by_what_it_does(layout, rule):
    rel, held, left = PAIRS[rule]
    files, _rel, _func = _real_files(layout)
    res = _apply_real({**files, rel: HEAD + held}, REAL[layout][0])
    assert res.drift and _findings(res, rel) == ["incomplete"], (rule, [(c.file, c.status) for p in res.patches for c in p.checks])
    res = _apply_real({**files, rel: HEAD + left}, REAL[layout][0])
    assert not res.drift and _findings(res, rel) == [], (rule, _findings(res, rel))


@pytest.mark.parametrize("rel", ["srt/layers/tests/test_ar_workspace.py", "test/srt/test_ar_workspace.py",
                                 "srt/layers/test_ar_workspace.py"])
def test_a_test_module_holds_no_gate_of_the_feature(rel):
    """The same rejecting helper: a finding in the runtime package, none in a test module."""
    code = HEAD + PAIRS["an exit on the feature's path vs one inside another backend's branch"][1]
    files, _rel, _func = _real_files("0.5.23")
    res = _apply_real({**files, rel: code}, "0.5.23")
    assert not res.drift and _findings(res, rel) == []
    runtime = "srt/layers/ar_workspace.py"
    res = _apply_real({**files, runtime: code}, "0.5.23")
    assert res.drift and _findings(res, runtime) == ["incomplete"]


# the capability compared with a set from a module the tree does not have: undecidable
PROBE = ("def fusion_ready(args):\n"
         "    from sglang.srt.platform_table import SUPPORTED\n"
         "    if torch.cuda.get_device_capability() in SUPPORTED and args.enable_flashinfer_allreduce_fusion:\n"
         "        return True\n"
         "    return False\n")
UNDECIDABLE = ("srt/layers/flashinfer_ar_probe.py", "import torch\n\n\n" + PROBE)


def _patches_with(tmp_path, extra: str):
    text = (SHIPPED_PATCHES / "sm120-flashinfer-allreduce-fusion.toml").read_text()
    text = text.replace("[[examples]]", extra + "\n[[examples]]", 1)
    (tmp_path / "sm120-flashinfer-allreduce-fusion.toml").write_text(text)
    return load_patches(tmp_path, ["sm120-flashinfer-allreduce-fusion"])


def test_ignore_covers_an_unverified_gate_the_patch_left_as_upstream_wrote_it(tmp_path):
    files, _rel, _func = _real_files("0.5.23")
    rel, code = UNDECIDABLE
    files[rel] = code
    res = _apply_real(files, "0.5.23")
    assert res.drift and _findings(res, rel) == ["unverified"]
    patches = _patches_with(tmp_path, '[[ignore]]\nfunction = "fusion_ready"\nreason = "a probe of another team"\n')
    res = run_patches(MemoryTree(files, pristine=True), patches, get_arch("sm120"), "0.5.23")
    assert not res.drift
    ignored = [loc for p in res.patches for s in p.sites for loc in s.locations
               if loc.status.value == "ignored" and loc.file == rel]
    assert len(ignored) == 1 and "a probe of another team" in ignored[0].detail


def test_ignore_does_not_excuse_an_unverified_gate_in_a_file_the_patch_edited(tmp_path):
    files, rel, func = _real_files("0.5.23")
    files[rel] = files[rel] + "\n\nimport torch\n\n\n" + PROBE
    patches = _patches_with(tmp_path, '[[ignore]]\nfunction = "fusion_ready"\nreason = "not ours"\n')
    res = run_patches(MemoryTree(files, pristine=True), patches, get_arch("sm120"), "0.5.23")
    assert res.drift and "unverified" in _findings(res, rel)


# -- a marker too common to name a feature -------------------------------------------------
_rels = st.text("abcdef/", min_size=1, max_size=6).map(lambda s: f"srt/{s}.py")
_markers = st.sampled_from(["tp_size", "backend", "FUSE_ALLREDUCE_MAX_BATCH_SIZE", "trtllm_mha"])


@given(hits=st.lists(st.tuples(_rels, st.lists(_markers, min_size=1, max_size=3, unique=True)), max_size=120,
                     unique_by=lambda h: h[0]),
       site=st.sets(_rels, max_size=5))
def test_feature_scope_keeps_site_modules_and_distinctive_markers_only(hits, site):
    notes: list[str] = []
    kept = set(feature_scope(hits, site.__contains__, notes))
    counts: dict[str, int] = {}
    for _rel, named in hits:
        for m in named:
            counts[m] = counts.get(m, 0) + 1
    common = {m for m, n in counts.items() if n > COMMON_MARKER_FILES}
    for rel, named in hits:
        assert (rel in kept) == (rel in site or not set(named) <= common), (rel, named)
    assert sorted(n.split("`")[1] for n in notes) == sorted(common)
    assert all(str(counts[n.split("`")[1]]) in n for n in notes)


# -- one function, one text ----------------------------------------------------------------
@given(table=st.lists(st.booleans(), min_size=8, max_size=8), extra=st.integers(0, 3))
def test_a_value_reads_the_same_whatever_atoms_it_does_not_depend_on(table, extra):
    """The verifier compares a gate's values before and after the patch as text: an atom
    that changes nothing (`x and not c or x and c`) must not make a value differ."""
    import itertools

    from forgepatch.patching.evaluation import _render

    names = ["a", "b", "c"]
    rows = list(itertools.product((False, True), repeat=3))
    plain = _render(names, rows, table)
    # the same function over one more atom, inserted at any position, that it ignores
    wide_names = names[:extra] + ["z_unused"] + names[extra:]
    wide_rows = list(itertools.product((False, True), repeat=4))
    lookup = dict(zip(rows, table))
    wide = [lookup[r[:extra] + r[extra + 1:]] for r in wide_rows]
    assert _render(wide_names, wide_rows, wide) == plain
    assert "z_unused" not in plain
    # and two different functions never read the same
    flipped = list(table)
    flipped[0] = not flipped[0]
    assert _render(names, rows, flipped) != plain
