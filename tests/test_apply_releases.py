"""`forgepatch apply --arch sm120` on real SGLang releases from PyPI, checked with `ast`.

Two layers: the named releases (one per gate layout) go through the real CLI end to end;
the acceptance corpus (every release with the fusion gate, `.post` included) goes through
the same services in-process, with an independent `ast` check of the result, `lint` on the
result, and the drift scan's status-only mode, which must agree with `apply`.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from forgepatch.sources import pypi_tree
from tests.support import astcheck
from tests.support.cli import forgepatch
from tests.support.releases import BEFORE, CORPUS, expected_sm120_gates

NAMED = ["0.5.3", "0.5.6", "0.5.10", "0.5.15", "0.5.20", "0.5.23"]


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def check_widened(version: str, read_orig, read_new, changed: list[str]) -> None:
    """With ``ast``: exactly the intended gates accept sm120, nothing else changed, and every
    new name resolves in the patched tree."""
    want = expected_sm120_gates(version)
    assert sorted(changed) == sorted({f for f, _ in want}), changed
    widened = set()
    for rel in changed:
        orig, new = read_orig(rel), read_new(rel)
        assert astcheck.strip_family(new, "sm120") == astcheck.strip_family(orig, "sm120"), rel
        before = astcheck.gates_accepting(orig, "sm120")
        after = astcheck.gates_accepting(new, "sm120")
        assert len(after) == len(before) + 1, (rel, before, after)  # one gate per file
        widened |= {(rel, fn) for fn, _ in after if (fn, _) not in before}
        compile(new, rel, "exec")
        assert astcheck.names_resolve(new, read_new, rel), rel
    assert widened == want


def check_release(version: str, tmp_path: Path) -> None:
    src = pypi_tree(version)
    before_src = tree_digest(src.package)
    out = tmp_path / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:{version}", "--out", out, "--json")
    assert run.rc == 0, run.err
    doc = run.json()
    assert doc["status"] == "changed" and doc["verified"] is True
    patched = out / "sglang"
    changed = sorted(doc["changed_files"])
    # every edit is reported, and only reported edits happen
    reported = {loc["file"] for p in doc["patches"] for s in p["sites"] for loc in s["locations"]
                if loc["status"] == "applied"}
    assert set(changed) == reported
    check_widened(version, lambda rel: (src.package / rel).read_text(),
                  lambda rel: (patched / rel).read_text() if (patched / rel).is_file() else None, changed)
    # unchanged files are byte-identical; the source cache is untouched
    for rel, digest in tree_digest(src.package).items():
        if rel not in changed:
            assert hashlib.sha256((patched / rel).read_bytes()).hexdigest() == digest, rel
    assert tree_digest(src.package) == before_src

    # lint on the result exits 0
    lint = forgepatch("lint", "--arch", "sm120", "--source", out, "--json")
    assert lint.rc == 0, lint.out + lint.err
    assert lint.json()["findings"] == []

    # second run on DIR: already-applied, no byte changes; --check 0 there, 1 on the original
    snapshot = tree_digest(out)
    again = forgepatch("apply", "--arch", "sm120", "--source", out, "--in-place", "--json")
    assert again.rc == 0, again.err
    statuses = {s["status"] for p in again.json()["patches"] for s in p["sites"]}
    # "ignored": a gate the shipped patch declares an exception (the mnnvl backend check)
    assert statuses <= {"already-applied", "not-applicable", "ignored"} and "already-applied" in statuses
    assert tree_digest(out) == snapshot
    patched_check = forgepatch("apply", "--arch", "sm120", "--source", out, "--check")
    assert patched_check.rc == 0 and "already patched" in patched_check.out
    check = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:{version}", "--check")
    assert check.rc == 1 and f"would change {len(changed)} file(s)" in check.out
    assert "applied" not in check.out + check.err  # --check never says it applied anything


@pytest.mark.parametrize("version", NAMED)
def test_apply_named_release(version, tmp_path):
    check_release(version, tmp_path)


@pytest.fixture(scope="module")
def sm120():
    from forgepatch.config import load_matrix
    from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES
    from forgepatch.patching.series import load_series

    return load_series(load_matrix(SHIPPED_MATRIX), "sm120", SHIPPED_PATCHES)


def _statuses(result):
    """Per patch and site; a declared exception the per-arch evaluation reports (a status
    scan has no evaluation: it produces no text) is left out of the comparison."""
    return [(p.patch_id, p.status.value, [(s.site, s.status.value) for s in p.sites
                                          if not (s.site == "self-check" and s.status.value == "ignored")])
            for p in result.patches]


@pytest.mark.slow
@pytest.mark.parametrize("version", CORPUS)
def test_sm120_corpus(version, sm120):
    """Every release with the fusion gate: apply succeeds, lint on the result is clean, the
    changed files are exactly the reported ones, and drift's status scan says the same."""
    from forgepatch.patching.series import run_series
    from forgepatch.patching.trees import DirTree, OverlayTree

    src = pypi_tree(version)
    tree = DirTree(src.package, pristine=True)
    res = run_series(sm120, tree, version)
    assert not res.drift and res.verified, res.to_json()
    changed = sorted(res.changed)
    assert set(changed) == set().union(*(p.edited_files for p in res.patches))

    def read_new(rel: str) -> str | None:
        if rel in res.changed:
            return res.changed[rel]
        return (src.package / rel).read_text() if (src.package / rel).is_file() else None

    check_widened(version, lambda rel: (src.package / rel).read_text(), read_new, changed)
    # lint on the result: the series finds it patched, changes nothing, and no gate of the
    # feature still rejects sm120
    again = run_series(sm120, OverlayTree(tree, res.changed), version)
    assert not again.drift and not again.changed, again.to_json()
    assert {s.status.value for p in again.patches for s in p.sites} <= {"already-applied", "not-applicable", "ignored"}
    # drift's status-only scan (no texts produced) reaches the same verdicts
    assert _statuses(run_series(sm120, tree, version, cache={})) == _statuses(res)


@pytest.mark.slow
@pytest.mark.parametrize("version", BEFORE)
def test_releases_before_the_fusion_gate_are_not_applicable(version, sm120):
    """Up to 0.5.1 the fusion is sm100-only: the patch's semantic bound says so (with its
    reason), and nothing changes."""
    from forgepatch.patching.series import run_series
    from forgepatch.patching.trees import DirTree

    res = run_series(sm120, DirTree(pypi_tree(version).package, pristine=True), version)
    assert not res.drift and not res.changed
    assert res.patches[0].status.value == "not-applicable"
    assert "sm100 only" in res.patches[0].sites[0].detail
    comm = (pypi_tree(version).package / "srt/layers/communicator.py").read_text()
    assert re.search(r"_is_sm100_supported\s+and", comm) and "_is_sm90_supported" not in comm


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
    # --diff says per site what it would do, on stderr (stdout is the diff alone)
    assert "runtime-fusion-gate" in run.err and "would apply" in run.err
    assert "runtime-fusion-gate" not in run.out
