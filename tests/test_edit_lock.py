"""Edit locks on real SGLang wheels: a patch's edit set is reviewed once per change, and a
pin where the patch edits anything else is `review` (exit 1, nothing written), not exit 0."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.support.cli import forgepatch

MATRIX = '''default_pin = "v0.5.23"

[upstream]
name = "sglang"
repo = "https://github.com/sgl-project/sglang"
package_dir = "python/sglang"

[pins."v0.5.23"]
pypi = "0.5.23"

[arches.sm120]
patches = ["{pid}"]
'''

# A fork maintainer's patch from the README: auto-enable the all-reduce fusion on sm120,
# found by the `tp_size` it tests. On 0.5.22 it widens the one auto-enable gate; on 0.5.23
# the same marker also matches the MiMo CuTeDSL gate next to it, which upstream keeps
# sm100-only on purpose (with `attn_cp_size == 1`, context parallelism off).
AR_AUTO = '''id = "user-ar-auto"
summary = "Auto-enable FlashInfer all-reduce fusion on sm120"
arches = ["sm120"]

[[sites]]
name = "auto-enable"
functions = ["_flashinfer_allreduce_fusion_auto_enable"]
modules = ["srt/arg_groups/overrides.py"]
markers = ["tp_size"]
lone = true
'''

# Meant for one model's default attention backend; in `_handle_model_specific_adjustments`
# every model has its own `if is_sm100_supported():` that sets "trtllm_mha".
TRTLLM_MHA_DEFAULT_ONLY = '''id = "user-trtllm-mha"
summary = "Default to trtllm_mha on sm120 like on sm100"
arches = ["sm120"]

[[sites]]
name = "mha-default"
functions = ["_handle_model_specific_adjustments"]
modules = ["srt/server_args.py"]
markers = ["trtllm_mha"]
lone = true
'''

# ... and as the maintainer writes it once `apply` has said the default alone is incomplete:
# the prefill check in `_handle_attention_backend_compatibility` raises on any arch but
# sm100 when the prefill backend is trtllm_mha, so the default alone makes sm120 fail at start.
TRTLLM_MHA = TRTLLM_MHA_DEFAULT_ONLY + '''
[[sites]]
name = "prefill-check"
functions = ["_handle_attention_backend_compatibility"]
modules = ["srt/server_args.py"]
markers = ["TRTLLM MHA backend for prefill"]
lone = true

[[ignore]]
function = "_get_default_attn_backend"
reason = "the generic default stays as upstream has it: this patch is for the models that pick trtllm_mha on sm100"
'''


def _project(tmp_path: Path, pid: str, text: str) -> Path:
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / f"{pid}.toml").write_text(text)
    (tmp_path / "matrix.toml").write_text(MATRIX.format(pid=pid))
    return tmp_path


def _lock(project: Path, pid: str) -> dict:
    return tomllib.loads((project / "patches" / f"{pid}.lock").read_text())


def test_marker_matching_a_neighbouring_gate_on_a_later_release_is_review(tmp_path):
    project = _project(tmp_path, "user-ar-auto", AR_AUTO)
    locked = forgepatch("patch", "lock", "--arch", "sm120", "--source", "pypi:0.5.22", cwd=project)
    assert locked.rc == 0, locked.err
    lock = _lock(project, "user-ar-auto")
    assert [s["accepted"] for s in lock["set"]] == [["sm120@0.5.22"]]
    assert [e["function"] for e in lock["set"][0]["edit"]] == ["_flashinfer_allreduce_fusion_auto_enable"]
    # the pin it was reviewed on passes
    assert forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.22", "--diff", cwd=project).rc == 0

    out = project / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--out", out, cwd=project)
    assert run.rc == 1, (run.out, run.err)
    assert not out.exists()  # nothing written
    assert "review" in run.out and "review" in run.err
    # the difference names the neighbouring gate: a new edit with the CP / MiMo condition
    new = [ln for ln in run.err.split(" | ") if "new edit, not in the lock" in ln]
    assert any("attn_cp_size == 1" in ln and "get_platform().is_sm120" in ln for ln in new), run.err
    # --check and --json say the same
    check = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--check", "--json", cwd=project)
    assert check.rc == 1
    doc = check.json()
    assert doc["status"] == "review"
    (patch,) = doc["patches"]
    assert patch["status"] == "review"
    site = next(s for s in patch["sites"] if s["site"] == "edit-lock")
    assert site["status"] == "review" and all(loc["status"] == "review" for loc in site["locations"])

    # accepting after reading the diff: the lock gains the 0.5.23 set, the run writes
    accepted = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--accept", "--out", out, cwd=project)
    assert accepted.rc == 0, accepted.err
    assert "accepted into" in accepted.err and "attn_cp_size" in accepted.err
    assert (out / "sglang" / "srt" / "arg_groups" / "overrides.py").is_file()
    lock = _lock(project, "user-ar-auto")
    assert sorted(a for s in lock["set"] for a in s["accepted"]) == ["sm120@0.5.22", "sm120@0.5.23"]
    assert len(lock["set"]) == 2 and len(lock["set"][1]["edit"]) == 2
    assert forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--diff", cwd=project).rc == 0


def test_one_sm100_gate_per_model_each_in_the_lock_and_a_new_models_gate_is_review(tmp_path):
    project = _project(tmp_path, "user-trtllm-mha", TRTLLM_MHA)
    assert forgepatch("patch", "lock", "--arch", "sm120", "--source", "pypi:0.5.12", cwd=project).rc == 0
    (locked,) = _lock(project, "user-trtllm-mha")["set"]
    gates = [e for e in locked["edit"] if e["function"] == "ServerArgs._handle_model_specific_adjustments"]
    # every model's gate is in the lock, each under its own model branch
    assert len(gates) == 3
    models = [" ".join(e["within"]) for e in gates]
    for model in ("GptOssForCausalLM", "LLAMA4_MODEL_ARCHS", "Olmo2ForCausalLM"):
        assert sum(model in m for m in models) == 1, models
    assert all(e["after"] and "is_sm120_supported()" in e["after"][0] for e in gates)

    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.13", "--check", "--json", cwd=project)
    assert run.rc == 1
    (patch,) = run.json()["patches"]
    assert patch["status"] == "review"
    site = next(s for s in patch["sites"] if s["site"] == "edit-lock")
    new = [loc for loc in site["locations"] if loc["detail"].startswith("new edit")]
    # the fourth model's gate (Gemma 4) is the new edit; the three reviewed ones are not listed
    assert len(new) == 1 and "Gemma4" in new[0]["detail"], site
    assert new[0]["file"] == "srt/server_args.py" and new[0]["line"]


def test_the_default_without_the_prefill_check_is_incomplete_naming_the_check(tmp_path):
    """By evaluation: the marker's own gates are widened, but the check that raises for a
    trtllm_mha prefill on anything but sm100 still rejects sm120: exit 1, nothing locked."""
    project = _project(tmp_path, "user-trtllm-mha", TRTLLM_MHA_DEFAULT_ONLY)
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.12", "--check", "--json", cwd=project)
    assert run.rc == 1
    (patch,) = run.json()["patches"]
    assert patch["status"] == "incomplete"
    site = next(s for s in patch["sites"] if s["site"] == "self-check")
    bad = {loc["symbol"]: loc for loc in site["locations"] if loc["status"] == "incomplete"}
    # the check that raises, and the generic default (which the complete patch declares)
    assert set(bad) == {"ServerArgs._handle_attention_backend_compatibility", "ServerArgs._get_default_attn_backend"}
    check = bad["ServerArgs._handle_attention_backend_compatibility"]
    assert check["file"] == "srt/server_args.py" and "trtllm_mha" in check["gate"] and "is_sm100_supported" in check["gate"]
    assert "admit sm120 as sm100" in check["detail"]
    locked = forgepatch("patch", "lock", "--arch", "sm120", "--source", "pypi:0.5.12", cwd=project)
    assert locked.rc == 1 and not (project / "patches" / "user-trtllm-mha.lock").exists()


def test_a_status_scan_judges_the_same_edits_as_apply(tmp_path):
    """drift runs status-only (a blob cache): it must say `review` where apply does."""
    from forgepatch.config import load_matrix
    from forgepatch.patching.library import PatchLibrary
    from forgepatch.patching.series import load_series, run_series
    from forgepatch.patching.trees import DirTree
    from forgepatch.sources import pypi_tree

    project = _project(tmp_path, "user-ar-auto", AR_AUTO)
    assert forgepatch("patch", "lock", "--arch", "sm120", "--source", "pypi:0.5.22", cwd=project).rc == 0
    series = load_series(load_matrix(project / "matrix.toml"), "sm120", PatchLibrary.only(project / "patches"))
    src = pypi_tree("0.5.23")
    full = run_series(series, DirTree(src.package, pristine=True), "0.5.23")
    scan = run_series(series, DirTree(src.package, pristine=True), "0.5.23", cache={})
    assert full.patches[0].status.value == scan.patches[0].status.value == "review"
    assert full.patches[0].edit_set == scan.patches[0].edit_set
    assert full.drift and scan.drift


def test_a_patch_without_a_lock_is_review_until_accepted(tmp_path):
    """Nobody accepted a new patch's edits: its first run is `review` (exit 1, nothing
    written, each edit listed file:line), reading it (`--check`, `--diff`) writes no lock, and
    `--accept` records exactly the set it made; a release where it edits more is review again."""
    project = _project(tmp_path, "user-ar-auto", AR_AUTO)
    out = project / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.22", "--out", out, cwd=project)
    assert run.rc == 1 and not out.exists(), run.err
    assert "review: no lock (user-ar-auto.lock): nobody accepted this patch's edits; 1 edit(s) to review" in run.err
    check = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.22", "--check", "--json", cwd=project)
    assert check.rc == 1 and check.json()["status"] == "review"
    (patch,) = check.json()["patches"]
    site = next(s for s in patch["sites"] if s["site"] == "edit-lock")
    (loc,) = site["locations"]
    assert loc["file"] == "srt/arg_groups/overrides.py" and loc["line"] > 0
    assert loc["symbol"] == "_flashinfer_allreduce_fusion_auto_enable" and "get_platform().is_sm120" in loc["detail"]
    diff = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.22", "--diff", cwd=project)
    assert diff.rc == 1 and "+" in diff.out and "is_sm120" in diff.out  # the diff to read is printed
    assert not (project / "patches" / "user-ar-auto.lock").exists()
    accepted = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.22", "--accept", "--out", out, cwd=project)
    assert accepted.rc == 0, accepted.err
    assert [s["accepted"] for s in _lock(project, "user-ar-auto")["set"]] == [["sm120@0.5.22"]]
    # 0.5.23: the marker also matches the neighbouring gate, one edit more than accepted
    again = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--check", "--json", cwd=project)
    assert again.rc == 1 and again.json()["status"] == "review"


def test_patch_lock_checks_every_arch_and_source_before_writing_a_lock(tmp_path):
    project = _project(tmp_path, "user-ar-auto", AR_AUTO)
    for bad in (["--arch", "sm120", "--arch", "sm999"], ["--arch", "sm120", "--source", "pypi:0.5.22",
                                                         "--source", "pypi:0.0.0.1"]):
        run = forgepatch("patch", "lock", *bad, *([] if "--source" in bad else ["--source", "pypi:0.5.22"]),
                         cwd=project)
        assert run.rc == 2 and len([ln for ln in run.err.splitlines() if ln.strip()]) == 1, run.err
        assert not (project / "patches" / "user-ar-auto.lock").exists(), bad  # nothing half-written


def test_a_broken_lock_is_bad_input_naming_the_file(tmp_path):
    project = _project(tmp_path, "user-ar-auto", AR_AUTO)
    assert forgepatch("patch", "lock", "--arch", "sm120", "--source", "pypi:0.5.22", cwd=project).rc == 0
    path = project / "patches" / "user-ar-auto.lock"
    path.write_text(path.read_text().replace("is_sm120", "is_sm121", 1))  # edited by hand: digest no longer holds
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.22", "--diff", cwd=project)
    assert run.rc == 2 and "user-ar-auto.lock" in run.err and "Traceback" not in run.err
    assert len([ln for ln in run.err.splitlines() if ln.strip()]) == 1
    path.write_text("format = [\n")
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.22", "--diff", cwd=project)
    assert run.rc == 2 and "user-ar-auto.lock:" in run.err and "Traceback" not in run.err


# -- the shipped locks ---------------------------------------------------------------------
def _shipped_locks():
    from forgepatch.config import load_matrix
    from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES

    matrix = load_matrix(SHIPPED_MATRIX)
    out = {}
    for arch in ("sm120", "sm121", "sm103"):
        for pid in matrix.arch(arch).patches:
            out.setdefault(pid, []).append(arch)
    return SHIPPED_PATCHES, out


def test_every_shipped_patch_ships_a_lock_for_every_corpus_release():
    from tests.support.releases import CORPUS

    shipped, arches = _shipped_locks()
    for pid, names in arches.items():
        lock = tomllib.loads((shipped / f"{pid}.lock").read_text())
        accepted = {a for s in lock["set"] for a in s["accepted"]}
        missing = [f"{arch}@{v}" for arch in names for v in CORPUS if f"{arch}@{v}" not in accepted]
        assert not missing, (pid, missing)


def test_the_custom_patch_lock_is_read_off_the_trees():
    """The sm103 guard is a .py codemod: its lock holds the call it inserts and the guard it
    defines, read off the trees, in the file the release checks arguments in."""
    shipped, _ = _shipped_locks()
    lock = tomllib.loads((shipped / "sm103-ep-cuda-graph-guard.lock").read_text())
    for s in lock["set"]:
        calls = [e for e in s["edit"] if e["function"].endswith("check_server_args")]
        assert len(calls) == 1 and calls[0]["before"] == []
        assert calls[0]["after"][0].startswith("_forgepatch_sm103_ep_graph_guard(")
        assert any(e["function"] == "_forgepatch_sm103_ep_graph_guard" and "if on_arch" in e["after"]
                   for e in s["edit"])


@pytest.mark.parametrize("arch", ["sm120", "sm103"])
def test_shipped_series_passes_its_lock_on_the_newest_release(arch, tmp_path):
    run = forgepatch("apply", "--arch", arch, "--source", "pypi:0.5.23", "--check", "--json", cwd=tmp_path)
    doc = json.loads(run.out)
    assert doc["status"] == "changed" and all(p["status"] == "applied" for p in doc["patches"]), doc
    assert all(p["edit_set"] for p in doc["patches"])


def test_drift_shows_review_and_the_edit_set_change_across_pins(tmp_path, nightlies_repo):
    """`drift` over a git history of releases judges the lock like apply, and says where the
    patch's edit set changed: here the MiMo gate the marker starts to match in 0.5.23."""
    # on 0.5.20 the runtime gate is on the feature's path too: this patch leaves it (declared)
    text = AR_AUTO + (
        '\n[[ignore]]\nfunction = "apply_flashinfer_allreduce_fusion"\n'
        'reason = "the runtime fusion gate is another patch\'s"\n')
    project = _project(tmp_path, "user-ar-auto", text)
    assert forgepatch("patch", "lock", "--arch", "sm120", "--source", "pypi:0.5.20", cwd=project).rc == 0
    run = forgepatch("drift", "--arch", "sm120", "--repo", nightlies_repo, "--revs", "v0.5.20,v0.5.23", "--json",
                     cwd=project)
    assert run.rc == 1, run.err
    doc = run.json()
    statuses = [r["patches"][0]["status"] for r in doc["revs"]]
    assert statuses == ["applied", "review"]
    text = forgepatch("drift", "--arch", "sm120", "--repo", nightlies_repo, "--revs", "v0.5.20,v0.5.23",
                      cwd=project).out
    (line,) = [ln for ln in text.splitlines() if "edit set" in ln and "->" in ln and "user-ar-auto" in ln]
    assert "(v0.5.20 -> v0.5.23)" in line and "attn_cp_size == 1" in line


def test_review_on_a_release_whose_edit_set_moved(tmp_path):
    """The fork carries the shipped sm120 patch as its own (same id), locked on 0.5.20 only.
    On 0.5.23 the runtime gate lives in another file and function (layer_boundary/residual/
    add_norm.py): the edit set differs from every locked one, so `review` (exit 1, nothing
    written), with the difference; `--accept` records it and the run writes."""
    from forgepatch.paths import SHIPPED_PATCHES

    pid = "sm120-flashinfer-allreduce-fusion"
    project = _project(tmp_path, pid, (SHIPPED_PATCHES / f"{pid}.toml").read_text())
    locked = forgepatch("patch", "lock", "--arch", "sm120", "--source", "pypi:0.5.20", cwd=project)
    assert locked.rc == 0, (locked.out, locked.err)
    lock = _lock(project, pid)
    assert [s["accepted"] for s in lock["set"]] == [["sm120@0.5.20"]]
    assert forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.20", "--diff", cwd=project).rc == 0

    out = project / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--out", out, cwd=project)
    assert run.rc == 1, (run.out, run.err)
    assert not out.exists()
    check = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--check", "--json", cwd=project)
    assert check.rc == 1
    doc = check.json()
    (patch,) = doc["patches"]
    assert patch["status"] == "review", patch["status"]
    site = next(s for s in patch["sites"] if s["site"] == "edit-lock")
    new = " ".join(loc["detail"] for loc in site["locations"])
    assert "add_norm.py" in json.dumps(site) or "flashinfer_ar_fusion_applies" in new, site

    accepted = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--accept", "--out", out, cwd=project)
    assert accepted.rc == 0, accepted.err
    assert (out / "sglang" / "srt" / "layers" / "layer_boundary" / "residual" / "add_norm.py").is_file()
    lock = _lock(project, pid)
    assert sorted(a for s in lock["set"] for a in s["accepted"]) == ["sm120@0.5.20", "sm120@0.5.23"]
    assert forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--diff", cwd=project).rc == 0
    assert forgepatch("apply", "--arch", "sm120", "--source", str(out), "--check", cwd=project).rc == 0
