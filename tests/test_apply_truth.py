"""Patch truth (issue 11): `apply` never reports success while the arch is still rejected,
and never edits what it does not report. Each case is a way the tool used to lie, built
on the real 0.5.23 (or 0.5.6) release sources with one small change."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from forgepatch.paths import SHIPPED_PATCHES
from forgepatch.patching.library import as_library
from forgepatch.sources import pypi_tree
from tests.support import astcheck
from tests.support.cli import forgepatch

PATCH_ID = "sm120-flashinfer-allreduce-fusion"
FUSION = "srt/layers/flashinfer_comm_fusion.py"
ADD_NORM = "srt/layers/layer_boundary/residual/add_norm.py"
HINT = "add a site for it to the patch, or mark it `ignore` with a reason"

# a second backend check in the site function, as a refactor might add it
SECOND_GATE = '''    if backend == "trtllm" and not (get_platform().is_sm90 or get_platform().is_sm100):
        raise ValueError(
            "FlashInfer allreduce fusion trtllm backend requires SM90 or SM10X."
        )

'''
# the runtime gate copied into a function no site names
COPY = '''

def flashinfer_ar_fusion_applies_decode(batch_size: int):
    return (
        (_is_sm90_supported or _is_sm100_supported)
        and get_exec().comm.flashinfer_allreduce_fusion_backend is not None
        and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE
    )
'''


@pytest.fixture(scope="module")
def release():
    return pypi_tree("0.5.23")


_UNLOCKED: list[Path] = []


def _unlocked_shipped() -> Path:
    """The shipped patches without their locks: these tests craft trees no lock was accepted
    on (a new gate, a copied function), and judge the engine's truth on them; the lock's
    `review` of such trees (and of a patch with no lock at all) is tested in test_edit_lock.py,
    so ``run`` sets aside the one review an unlocked copy always gets."""
    if not _UNLOCKED:
        import tempfile

        where = Path(tempfile.mkdtemp(prefix="unlocked-patches-"))
        for f in SHIPPED_PATCHES.iterdir():
            if f.suffix in (".toml", ".py"):
                shutil.copy(f, where / f.name)
        _UNLOCKED.append(where)
    return _UNLOCKED[0]


def run(tree_changes: dict[str, str], release, patches=None, arch="sm120", version="0.5.23", ids=None, **kw):
    """The arch's series on the release with ``tree_changes`` over it, in memory."""
    from forgepatch.arch import get_arch
    from forgepatch.patching.patchset import load_patches
    from forgepatch.patching.series import Series, run_series
    from forgepatch.patching.trees import DirTree, OverlayTree

    pdir = patches or _unlocked_shipped()
    ids = ids or ([PATCH_ID] if arch in ("sm120", "sm121") else ["sm103-ep-cuda-graph-guard"])
    series = Series(get_arch(arch), tuple(load_patches(pdir, ids)))
    result = run_series(series, OverlayTree(DirTree(release.package), tree_changes, pristine=True), version, **kw)
    return _without_no_lock_review(result) if patches is None else result


def _without_no_lock_review(result):
    """``result`` less the `review` an unlocked copy of a shipped patch gets for making edits
    at all ("no lock ..."); any other finding, a lock's included, stays."""
    from forgepatch.patching.editlock import EDIT_LOCK_SITE
    from forgepatch.patching.model import Status

    for pres in result.patches:
        kept = [s for s in pres.sites if not (s.site == EDIT_LOCK_SITE and s.detail.startswith("no lock ("))]
        if len(kept) != len(pres.sites):
            pres.sites = kept
            pres.status = Status.worst([s.status for s in kept])
    return result


def text(release, rel: str) -> str:
    return (release.package / rel).read_text()


def locations(result, status: str):
    return [(s.site, loc) for p in result.patches for s in p.sites for loc in s.locations if loc.status.value == status]


def with_second_gate(release) -> str:
    src = text(release, FUSION)
    anchor = '    if backend == "cutedsl":\n'
    assert anchor in src
    return src.replace(anchor, SECOND_GATE + anchor, 1)


def test_every_gate_in_a_site_function_is_widened_and_reported(release):
    fusion = with_second_gate(release)
    res = run({FUSION: fusion}, release)
    assert not res.drift, res.to_json()
    new = res.changed[FUSION]
    gates = [fn for fn, _ in astcheck.gates_accepting(new, "sm120")]
    assert gates == ["_resolve_backend", "_resolve_backend"]  # both, not only the first
    assert astcheck.strip_family(new, "sm120") == astcheck.strip_family(fusion, "sm120")
    edits = [loc for site, loc in locations(res, "applied") if site == "backend-check"]
    lines = [i + 1 for i, ln in enumerate(fusion.splitlines()) if "is_sm90 or get_platform().is_sm100)" in ln]
    assert [loc.line for loc in edits] == lines and len(lines) == 2
    # the status scan (drift) reports the same two edits and no gap
    scan = run({FUSION: fusion}, release, cache={})
    assert [loc.line for site, loc in locations(scan, "applied") if site == "backend-check"] == lines
    assert not scan.drift


def test_a_site_that_expects_one_gate_reports_two_as_ambiguous(release, tmp_path):
    pdir = tmp_path / "patches"
    shutil.copytree(SHIPPED_PATCHES, pdir)
    toml = pdir / f"{PATCH_ID}.toml"
    toml.write_text(toml.read_text().replace('markers = ["FlashInfer allreduce fusion"]\n',
                                             'markers = ["FlashInfer allreduce fusion"]\ngates = "one"\n'))
    res = run({FUSION: with_second_gate(release)}, release, patches=pdir)
    assert res.drift and FUSION not in res.changed
    (site, loc), = locations(res, "drift")
    assert site == "backend-check" and loc.symbol == "_resolve_backend" and "ambiguous: 2 gates" in loc.detail


DECOY = '''"""MoE runner backend selection."""

from sglang.srt.runtime_context import get_platform


def _resolve_backend(backend: str) -> str:
    """Unlike FlashInfer allreduce fusion, the MoE runner has no trtllm path on SM90."""
    # FlashInfer allreduce fusion is resolved elsewhere (flashinfer_comm_fusion.py)
    if get_platform().is_sm90 or get_platform().is_sm100:
        return "flashinfer_cutlass"
    return "triton"
'''


@pytest.mark.parametrize("anywhere", [False, True])
def test_a_same_named_function_elsewhere_is_never_touched(release, tmp_path, anywhere):
    """The marker phrase in a docstring and a comment only: not a site, even when the
    site's modules are only a search order (``anywhere = true``)."""
    pdir = tmp_path / "patches"
    shutil.copytree(SHIPPED_PATCHES, pdir)
    if anywhere:
        toml = pdir / f"{PATCH_ID}.toml"
        toml.write_text(toml.read_text().replace(
            'modules = ["srt/layers/flashinfer_comm_fusion.py"]\n',
            'modules = ["srt/layers/flashinfer_comm_fusion.py"]\nanywhere = true\n'))
    decoy = "srt/layers/moe/moe_backend_check.py"
    res = run({decoy: DECOY}, release, patches=pdir)
    assert not res.drift and decoy not in res.changed
    assert all(loc.file != decoy for _site, loc in locations(res, "applied"))
    # with the phrase in code (an error message), the unhinted module is still not a site,
    # unless the site says anywhere
    in_code = DECOY.replace(
        '    if get_platform().is_sm90 or get_platform().is_sm100:\n        return "flashinfer_cutlass"\n',
        '    if not (get_platform().is_sm90 or get_platform().is_sm100):\n'
        '        raise ValueError("FlashInfer allreduce fusion: no backend")\n')
    assert in_code != DECOY
    res = run({decoy: in_code}, release, patches=pdir)
    assert (decoy in res.changed) is anywhere
    if not anywhere:  # the site's modules bind; the self-check still sees the gate
        assert res.incomplete and [loc.file for _s, loc in locations(res, "incomplete")] == [decoy]
    if anywhere:
        assert any(loc.file == decoy for _s, loc in locations(res, "applied"))


def test_a_gate_copied_outside_the_sites_makes_apply_incomplete(release):
    add_norm = text(release, ADD_NORM) + COPY
    res = run({ADD_NORM: add_norm}, release)
    assert res.drift and res.incomplete
    (site, loc), = locations(res, "incomplete")
    line = add_norm.splitlines().index("        (_is_sm90_supported or _is_sm100_supported)", 300) + 1
    assert (site, loc.file, loc.line, loc.symbol) == ("self-check", ADD_NORM, line, "flashinfer_ar_fusion_applies_decode")
    assert loc.gate == "_is_sm90_supported or _is_sm100_supported" and HINT in loc.detail
    # drift's status scan finds it too
    scan = run({ADD_NORM: add_norm}, release, cache={})
    assert [(s, loc.line) for s, loc in locations(scan, "incomplete")] == [("self-check", line)]


def _tree_copy(release, tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(release.package, root / "sglang")
    return root


def test_incomplete_on_the_cli_exits_1_writes_nothing_and_names_the_gate(release, tmp_path):
    root = _tree_copy(release, tmp_path)
    target = root / "sglang" / ADD_NORM
    target.write_text(target.read_text() + COPY)
    before = {p: p.read_bytes() for p in root.rglob("*.py")}
    run_ = forgepatch("apply", "--arch", "sm120", "--source", root, "--in-place")
    assert run_.rc == 1 and "Traceback" not in run_.err
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == before  # nothing written
    err = " ".join(run_.err.split())
    assert f"{ADD_NORM}:" in err and "flashinfer_ar_fusion_applies_decode: `_is_sm90_supported or _is_sm100_supported`" in err
    assert HINT in err and "nothing written" in err
    assert "incomplete" in run_.out and "self-check" in run_.out
    js = forgepatch("apply", "--arch", "sm120", "--source", root, "--check", "--json")
    assert js.rc == 1 and js.json()["status"] == "incomplete"
    lint = forgepatch("lint", "--arch", "sm120", "--source", root, "--json")
    assert lint.rc == 1
    assert [(f["file"], f["function"]) for f in lint.json()["findings"]] == [(ADD_NORM, "flashinfer_ar_fusion_applies_decode")]


def test_a_declared_exception_is_reported_not_silent(release, tmp_path):
    pdir = tmp_path / "patches"
    shutil.copytree(SHIPPED_PATCHES, pdir)
    toml = pdir / f"{PATCH_ID}.toml"
    reason = "decode-only fusion is validated on sm90/sm100 only"
    toml.write_text(toml.read_text().replace("[[examples]]", (
        "[[ignore]]\n"
        'function = "flashinfer_ar_fusion_applies_decode"\n'
        'module = "srt/layers/layer_boundary/**"\n'
        'gate = "_is_sm90_supported or _is_sm100_supported"\n'
        f'reason = "{reason}"\n\n[[examples]]'), 1))
    root = _tree_copy(release, tmp_path)
    target = root / "sglang" / ADD_NORM
    target.write_text(target.read_text() + COPY)
    out = forgepatch("--patches", pdir, "apply", "--arch", "sm120", "--source", root, "--out", tmp_path / "o")
    assert out.rc == 0, out.err
    text_out = " ".join(out.out.split())
    assert "ignored" in text_out and reason in text_out and "flashinfer_ar_fusion_applies_decode" in text_out
    # this one, and the mnnvl gate the shipped patch declares itself (`_resolve_backend`)
    assert "2 left as declared exceptions" in text_out
    # the copy is left as it is; the sites are patched
    patched = (tmp_path / "o/sglang" / ADD_NORM).read_text()
    assert patched.endswith(COPY)
    lint = forgepatch("--patches", pdir, "lint", "--arch", "sm120", "--source", root, "--json")
    assert lint.rc == 0 and lint.json()["findings"] == []
    (ignored,) = [i for i in lint.json()["ignored"] if i["function"] != "_resolve_backend"]  # the shipped one aside
    assert ignored["function"] == "flashinfer_ar_fusion_applies_decode" and ignored["ignored"] == reason
    # an exception needs a reason
    toml.write_text(toml.read_text().replace(f'reason = "{reason}"\n', ""))
    bad = forgepatch("--patches", pdir, "apply", "--arch", "sm120", "--source", root, "--check")
    assert bad.rc == 2 and "ignore[0].reason" in bad.err


def test_a_helper_defined_as_a_function_is_called_never_used_as_a_flag(release):
    src = text(release, ADD_NORM)
    anchor = "_is_sm100_supported = _is_cuda and get_platform().is_sm100\n"
    helper = anchor + "\n\ndef _is_sm120_supported() -> bool:\n    return _is_cuda and get_platform().is_sm120\n\n"
    res = run({ADD_NORM: src.replace(anchor, helper, 1)}, release)
    assert not res.drift, res.to_json()
    new = res.changed[ADD_NORM]
    assert "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported())" in new
    assert new.count("_is_sm120_supported =") == 0  # no flag of the same name added
    assert astcheck.names_resolve(new, lambda rel: text(release, rel) if (release.package / rel).is_file() else None,
                                  ADD_NORM)


def test_a_flag_is_never_called(release):
    src = text(release, FUSION)
    flagged = src.replace("\n\n\ndef _mnnvl_supported", "\n\nis_sm120_supported = True\n\n\ndef _mnnvl_supported", 1)
    flagged = flagged.replace("if not (get_platform().is_sm90 or get_platform().is_sm100):",
                              "if not (is_sm90_supported() or is_sm100_supported()):", 1)
    res = run({FUSION: flagged}, release)
    assert res.drift and FUSION not in res.changed
    (site, loc), = locations(res, "drift")
    assert site == "backend-check" and "cannot call is_sm120_supported()" in loc.detail and "flag" in loc.detail


def test_sm103_guard_goes_to_the_language_server_only():
    """0.5.6 has a `check_server_args` in `multimodal_gen/` (the diffusion server) too."""
    release = pypi_tree("0.5.6")
    mm = [p for p in release.package.glob("multimodal_gen/**/*.py") if "def check_server_args(" in p.read_text()]
    assert mm, "0.5.6 ships a diffusion-server check_server_args"
    res = run({}, release, arch="sm103", version="0.5.6")
    assert not res.drift and sorted(res.changed) == ["srt/server_args.py"]
    assert {loc.file for _s, loc in locations(res, "applied")} == {"srt/server_args.py"}
    symbols = [loc.symbol for _s, loc in locations(res, "applied")]
    assert symbols == ["ServerArgs.check_server_args", "<module>"]


# -- codemods held to their reports ------------------------------------------------------
LYING = '''
import libcst as cst

from forgepatch.patching.codemods.base import SiteCodemod
from forgepatch.patching.model import Status

PATCH = {{
    "id": "{pid}", "summary": "a codemod that {what}", "arches": ["sm120"],
    "sites": [{{"name": "s", "functions": ["_resolve_backend"], "modules": ["srt/layers/flashinfer_comm_fusion.py"],
               "markers": ["FlashInfer allreduce fusion"]}}],
}}


class Codemod(SiteCodemod):
    def edit_function(self, func, site, symbol, ctx):
        body = list(func.body.body)
        edited = func.with_changes(body=func.body.with_changes(body=[cst.parse_statement("pass")] + body))
        {body}

    def finalize_module(self, module, ctx):
        {final}
'''
CASES = {
    "edits-silently": ("edits without reporting", "return edited", "return module",
                       "the codemod changed this function without reporting it"),
    "reports-only": ("reports an edit it does not make",
                     'ctx.report(site.name, Status.APPLIED, func, symbol, "added pass")\n        return None',
                     "return module", "reported an edit the function does not have"),
    "adds-silently": ("adds module code without saying so",
                      'ctx.report(site.name, Status.APPLIED, func, symbol, "added pass")\n        return edited',
                      'return module.with_changes(body=list(module.body) + [cst.parse_statement("X = 1")])',
                      "finalize_module changed the file without saying what"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_codemod_that_does_not_do_what_it_reports_fails(release, tmp_path, case):
    what, body, final, message = CASES[case]
    pdir = tmp_path / "patches"
    pdir.mkdir()
    (pdir / f"{case}.py").write_text(LYING.format(pid=case, what=what, body=body, final=final))
    cfg = tmp_path / "matrix.toml"
    cfg.write_text(f'default_pin = "a"\n[pins.a]\npypi = "0.5.23"\n[arches.sm120]\npatches = ["{case}"]\n')
    root = _tree_copy(release, tmp_path)
    before = {p: p.read_bytes() for p in root.rglob("*.py")}
    out = forgepatch("--config", cfg, "--patches", pdir, "apply", "--arch", "sm120", "--source", root, "--in-place", "--json")
    assert out.rc == 1
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == before
    doc = out.json()
    assert doc["status"] == "incomplete"
    details = [loc["detail"] for p in doc["patches"] for s in p["sites"] for loc in s["locations"]
               if loc["status"] == "incomplete"]
    assert any(message in d for d in details), details


# -- every stage goes through the same check ----------------------------------------------
def _commit_with_copy(repo: Path, base: str = "v0.5.23") -> str:
    import subprocess

    def git(*args, **kw):
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, **kw).stdout.strip()

    path = f"python/sglang/{ADD_NORM}"
    git("checkout", "-q", "-f", base)
    target = repo / path
    target.write_text(target.read_text() + COPY)
    git("add", path)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "copy the fusion gate")
    return git("rev-parse", "HEAD")


def test_fork_and_drift_refuse_an_incomplete_series(nightly_clone, tmp_path, capsys):
    from forgepatch.cli import main

    sha = _commit_with_copy(nightly_clone)
    rc = main(["fork", "--arch", "sm120", "--repo", str(nightly_clone), "--rev", sha, "--pin", "copy", "--json"])
    out, err = capsys.readouterr()
    assert rc == 1 and json.loads(out)["status"] == "drift"
    import subprocess

    heads = subprocess.run(["git", "-C", str(nightly_clone), "branch", "--list", "forgepatch/*"],
                           capture_output=True, text=True).stdout
    assert "copy" not in heads  # no branch moved
    rc = main(["drift", "--arch", "sm120", "--repo", str(nightly_clone), "--revs", f"v0.5.23,{sha}", "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert rc == 1 and doc["drift"] is True
    assert [r["patches"][0]["status"] for r in doc["revs"]] == ["applied", "incomplete"]
    # the one-line summary counts the incomplete revision and names it (not "drift at 0 of 2")
    assert err.strip().splitlines()[-1].startswith("forgepatch: error: incomplete at 1 of 2 revision(s): ")
    assert err.strip().endswith("(incomplete)")
    rc = main(["drift", "--arch", "sm120", "--repo", str(nightly_clone), "--revs", f"v0.5.23,{sha}", "--markdown"])
    md, _ = capsys.readouterr()
    assert rc == 1 and "INCOMPLETE" in md and "flashinfer_ar_fusion_applies_decode" in md


def test_build_refuses_an_incomplete_series(release, tmp_path):
    """The image build patches through the same series: an incomplete one builds nothing."""
    from forgepatch.config import load_matrix
    from forgepatch.errors import Failure
    from forgepatch.images.prepare import prepare, resolve_target
    from forgepatch.paths import SHIPPED_MATRIX

    root = _tree_copy(release, tmp_path)
    target_file = root / "sglang" / ADD_NORM
    target_file.write_text(target_file.read_text() + COPY)
    matrix = load_matrix(SHIPPED_MATRIX, as_library(SHIPPED_PATCHES))
    target = resolve_target(matrix, "sm120", source=str(root), pin="v0.5.23", base_image="forgepatch-test/none")
    with pytest.raises(Failure, match="drifted"):
        prepare(target, matrix, SHIPPED_PATCHES, tmp_path / "ctx")
    assert not (tmp_path / "ctx").exists() or not any((tmp_path / "ctx").iterdir())


def test_check_and_diff_say_what_they_did(release, tmp_path):
    check = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--check")
    assert check.rc == 1 and "would change 3 file(s)" in check.out
    assert "applied" not in check.out + check.err
    diff = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.6", "--diff")
    assert diff.rc == 0
    # the per-site status goes to stderr, so "not applicable" is not silent
    assert "auto-enable-gate" in diff.err and "not-applicable" in diff.err
    assert diff.out.startswith("--- a/sglang/srt/layers/communicator.py")
    ast.parse((release.package / ADD_NORM).read_text())  # the fixture tree is intact


def test_a_status_scan_carries_a_failure_only_the_run_with_texts_sees(release, tmp_path):
    """A drift scan edits functions in memory and never runs ``finalize_module``: a codemod
    that changes the module there without saying so is caught by the run with texts only.
    The scan must say what apply says, incomplete, with the same location and message, not
    just a worse status with no reason (issue 21: carry_evaluation for a non-evaluation cause)."""
    what, body, final, message = CASES["adds-silently"]
    pdir = tmp_path / "patches"
    pdir.mkdir()
    (pdir / "adds-silently.py").write_text(LYING.format(pid="adds-silently", what=what, body=body, final=final))
    full = run({}, release, patches=pdir, ids=["adds-silently"])
    scan = run({}, release, patches=pdir, ids=["adds-silently"], cache={})
    for res in (full, scan):
        (pres,) = res.patches
        site = next(s for s in pres.sites if s.site == "s")
        assert site.status.value == "incomplete" and pres.status.failed, res.to_json()
        assert any(message in loc.detail and loc.file == FUSION for loc in site.locations), res.to_json()
        assert message in site.detail
