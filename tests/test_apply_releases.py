"""`forgepatch apply --arch sm120` on real SGLang releases from PyPI, checked with `ast`."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from packaging.version import Version

from forgepatch.sources import pypi_tree
from tests.support import astcheck
from tests.support.cli import forgepatch

NAMED = ["0.5.3", "0.5.6", "0.5.10", "0.5.15", "0.5.20", "0.5.23"]
# Every other 0.5.x release from 0.5.3 to 0.5.23: "the same must hold on releases the
# tests do not name" — the expectations below are written from the releases' layouts, not
# from the tool's output.
OTHERS = ["0.5.4", "0.5.5", "0.5.7", "0.5.8", "0.5.9", "0.5.11", "0.5.12", "0.5.13", "0.5.14",
          "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.21", "0.5.22"]


def expected_gates(version: str) -> set[tuple[str, str]]:
    """(file, function) of each gate the patch must widen, per DESIGN.md §4 and the wheels."""
    v = Version(version)
    if v < Version("0.5.8"):
        runtime = ("srt/layers/communicator.py", "_gather_hidden_states_and_residual")
    elif v <= Version("0.5.20"):
        runtime = ("srt/layers/communicator.py", "apply_flashinfer_allreduce_fusion")
    elif v == Version("0.5.21"):
        runtime = ("srt/layers/layer_boundary/residual/add_norm.py", "apply_flashinfer_allreduce_fusion")
    else:
        runtime = ("srt/layers/layer_boundary/residual/add_norm.py", "flashinfer_ar_fusion_applies")
    gates = {runtime}
    if Version("0.5.10") <= v < Version("0.5.15"):
        gates.add(("srt/server_args.py", "_handle_model_specific_adjustments"))
    elif v >= Version("0.5.15"):
        gates.add(("srt/arg_groups/overrides.py", "_flashinfer_allreduce_fusion_auto_enable"))
    if v >= Version("0.5.14"):
        gates.add(("srt/layers/flashinfer_comm_fusion.py", "_resolve_backend"))
    return gates


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def check_release(version: str, tmp_path: Path) -> None:
    src = pypi_tree(version)
    before_src = tree_digest(src.package)
    out = tmp_path / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:{version}", "--out", out, "--json")
    assert run.rc == 0, run.err
    doc = run.json()
    assert doc["status"] == "changed"
    patched = out / "sglang"
    changed = sorted(doc["changed_files"])
    want = expected_gates(version)
    assert changed == sorted({f for f, _ in want}), changed

    # 1. exactly the intended gates accept sm120, and nothing else changed
    widened = set()
    for rel in changed:
        orig = (src.package / rel).read_text()
        new = (patched / rel).read_text()
        assert astcheck.strip_family(new, "sm120") == astcheck.strip_family(orig, "sm120"), rel
        before = astcheck.gates_accepting(orig, "sm120")
        after = astcheck.gates_accepting(new, "sm120")
        assert len(after) == len(before) + 1, (rel, before, after)  # one gate per file
        widened |= {(rel, fn) for fn, _ in after if (fn, _) not in before}
        compile(new, rel, "exec")  # 2. every changed file compiles
        # 3. every new name resolves inside the tree
        if "_is_sm120_supported" in new:
            assert astcheck.module_binds(new, "_is_sm120_supported"), rel
        if "is_sm120_supported(" in new:
            assert astcheck.module_binds(new, "is_sm120_supported"), rel
            for module in astcheck.imports_of(new, "is_sm120_supported"):
                path = patched / Path(*module.split(".")[1:])
                files = [path.with_suffix(".py"), path / "__init__.py", *path.glob("*.py")]
                defined = re.compile(r"^(def is_sm120_supported\(|is_sm120_supported\s*=)", re.M)
                assert any(defined.search(f.read_text()) for f in files if f.is_file()), module
        if re.search(r"\.is_sm120\b", new):
            assert "is_sm120" in (patched / "srt/runtime_context.py").read_text()
    assert widened == want
    # unchanged files are byte-identical; the source cache is untouched
    for rel, digest in tree_digest(src.package).items():
        if rel not in changed:
            assert hashlib.sha256((patched / rel).read_bytes()).hexdigest() == digest, rel
    assert tree_digest(src.package) == before_src

    # 4. second run on DIR: already-applied, no byte changes; --check 0 there, 1 on the original
    snapshot = tree_digest(out)
    again = forgepatch("apply", "--arch", "sm120", "--source", out, "--in-place", "--json")
    assert again.rc == 0, again.err
    statuses = {s["status"] for p in again.json()["patches"] for s in p["sites"]}
    assert statuses <= {"already-applied", "not-applicable"} and "already-applied" in statuses
    assert tree_digest(out) == snapshot
    assert forgepatch("apply", "--arch", "sm120", "--source", out, "--check").rc == 0
    assert forgepatch("apply", "--arch", "sm120", "--source", f"pypi:{version}", "--check").rc == 1


@pytest.mark.parametrize("version", NAMED)
def test_apply_named_release(version, tmp_path):
    check_release(version, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("version", OTHERS)
def test_apply_other_release(version, tmp_path):
    check_release(version, tmp_path)


def test_mixed_and_sm100_only_gates_are_not_widened(tmp_path):
    """0.5.23: the multi-node clause `(view.nnodes == 1 or get_platform().is_sm100)` and the
    sm100-only cutedsl/mnnvl branches keep rejecting sm120."""
    out = tmp_path / "o"
    assert forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--out", out).rc == 0
    overrides = (out / "sglang/srt/arg_groups/overrides.py").read_text()
    assert "(view.nnodes == 1 or get_platform().is_sm100)" in overrides
    fusion = (out / "sglang/srt/layers/flashinfer_comm_fusion.py").read_text()
    assert "if not get_platform().is_sm100:" in fusion  # cutedsl requires Blackwell
    assert fusion.count("is_sm120") == 1


def test_sm121_uses_the_sm120_family(tmp_path):
    run = forgepatch("apply", "--arch", "sm121", "--source", "pypi:0.5.20", "--diff")
    assert run.rc == 0
    assert "+_is_sm120_supported = _is_cuda and get_platform().is_sm120" in run.out
    assert "sm121" not in run.out
