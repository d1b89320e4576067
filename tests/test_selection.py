"""Precise selection on real SGLang wheels: `within` names one model's branch, `[[ignore]]`
means "never edit this gate", and `gates = "one"` counts only gates that still reject."""

from __future__ import annotations

import pytest

from pathlib import Path

from forgepatch.paths import SHIPPED_PATCHES
from tests.support.cli import forgepatch
from tests.test_edit_lock import MATRIX, TRTLLM_MHA


def _project(tmp_path: Path, pid: str, text: str) -> Path:
    (tmp_path / "patches").mkdir(parents=True)
    (tmp_path / "patches" / f"{pid}.toml").write_text(text)
    (tmp_path / "matrix.toml").write_text(MATRIX.format(pid=pid))
    return tmp_path


def _edits(project: Path, version: str) -> tuple[int, dict]:
    """The patch's run on the release, its edit set accepted first (a new patch has no lock:
    `review` until a person accepts it, test_edit_lock.py)."""
    run = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:{version}", "--check", "--json", "--accept",
                     cwd=project)
    (patch,) = run.json()["patches"]
    return run.rc, patch


def test_within_names_one_models_branch(tmp_path):
    text = TRTLLM_MHA.replace('lone = true\n', 'lone = true\nwithin = ["GptOssForCausalLM"]\n', 1)
    project = _project(tmp_path, "user-trtllm-mha", text)
    _rc, patch = _edits(project, "0.5.12")
    assert patch["status"] == "applied"
    gates = [e for e in patch["edits"] if e["function"] == "ServerArgs._handle_model_specific_adjustments"]
    assert len(gates) == 1 and "GptOssForCausalLM" in " ".join(gates[0]["within"]), gates
    # the other models' sm100 gates are untouched (without `within` the marker takes all three)
    (site,) = [s for s in patch["sites"] if s["site"] == "mha-default"]
    assert [loc["status"] for loc in site["locations"]] == ["applied"]


def test_within_that_matches_nothing_is_drift_not_a_silent_no_op(tmp_path):
    text = TRTLLM_MHA.replace('lone = true\n', 'lone = true\nwithin = ["NoSuchModelForCausalLM"]\n', 1)
    project = _project(tmp_path, "user-trtllm-mha", text)
    rc, patch = _edits(project, "0.5.12")
    assert rc == 1 and patch["status"] == "drift"


def test_ignore_means_never_edit_this_gate(tmp_path):
    """The shipped sm120 patch with the backend check declared an exception: the gate is
    reported `ignored` with the reason, and it is not widened."""
    shipped = (SHIPPED_PATCHES / "sm120-flashinfer-allreduce-fusion.toml").read_text()
    text = shipped.replace("[[examples]]", '''[[ignore]]
function = "_resolve_backend"
reason = "this fork keeps the backend check as upstream has it"

[[examples]]''', 1)
    project = _project(tmp_path, "sm120-flashinfer-allreduce-fusion", text)
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--diff", cwd=project)
    assert run.rc == 1 and "review: no lock" in run.err, run.err  # this copy has no lock: nobody accepted it
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--diff", "--accept", cwd=project)
    assert run.rc == 0, run.err
    assert "flashinfer_comm_fusion.py" not in run.out  # the diff leaves the backend check alone
    assert "add_norm.py" in run.out and "overrides.py" in run.out
    rc, patch = _edits(project, "0.5.23")
    (site,) = [s for s in patch["sites"] if s["site"] == "backend-check"]
    assert site["status"] == "ignored" and "keeps the backend check" in site["locations"][0]["detail"]
    assert not any(e["function"] == "_resolve_backend" for e in patch["edits"])


def test_gates_one_counts_only_gates_that_still_reject(tmp_path):
    """`gates = "one"` with a second, already widened gate beside it is not ambiguous."""
    patch = '''id = "one-gate"
summary = "one gate"
arches = ["sm120"]

[[sites]]
name = "s"
functions = ["pick"]
markers = ["fusion"]
gates = "one"

[[examples]]
name = "the gate that already admits sm120 does not count"
path = "srt/x.py"
context = { "srt/utils.py" = "def is_sm90_supported(): ...\\ndef is_sm100_supported(): ...\\ndef is_sm120_supported(): ...\\n" }
before = \'\'\'
from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported


def pick(fusion):
    if fusion and (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):
        return 1
    if fusion and (is_sm90_supported() or is_sm100_supported()):
        return 2
\'\'\'
after = \'\'\'
from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported


def pick(fusion):
    if fusion and (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):
        return 1
    if fusion and (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):
        return 2
\'\'\'

[[examples]]
name = "two gates that still reject are ambiguous"
path = "srt/x.py"
context = { "srt/utils.py" = "def is_sm90_supported(): ...\\ndef is_sm100_supported(): ...\\ndef is_sm120_supported(): ...\\n" }
before = \'\'\'
from sglang.srt.utils import is_sm90_supported, is_sm100_supported


def pick(fusion):
    if fusion and (is_sm90_supported() or is_sm100_supported()):
        return 1
    if fusion and (is_sm90_supported() or is_sm100_supported()):
        return 2
\'\'\'
'''
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "one-gate.toml").write_text(patch)
    run = forgepatch("--patches", tmp_path / "patches", "patch", "test", "one-gate", cwd=tmp_path)
    assert run.rc == 0, run.out + run.err
    assert "ok   one-gate: the gate that already admits sm120 does not count" in run.out


def test_within_excuses_only_the_other_branches_never_a_gate_inside_its_own(tmp_path):
    """Adversary: a second sm100 gate of the feature inside the GptOss branch that the codemod
    does not widen (a mixed disjunction). `within` declares the OTHER models' gates not the
    patch's; this one is inside the named branch, so it stays incomplete: exit 1, not 0."""
    import shutil

    from forgepatch.sources import pypi_tree

    src = tmp_path / "src"
    shutil.copytree(pypi_tree("0.5.12").package, src / "sglang")
    args = src / "sglang" / "srt" / "server_args.py"
    text = args.read_text()
    anchor = '        elif model_arch in ["GptOssForCausalLM"]:\n'
    assert text.count(anchor) == 1
    args.write_text(text.replace(anchor, anchor + (
        '            if is_sm100_supported() or self.enable_dp_attention:\n'
        '                self.prefill_attention_backend = "trtllm_mha"\n'), 1))
    text = TRTLLM_MHA.replace('lone = true\n', 'lone = true\nwithin = ["GptOssForCausalLM"]\n', 1)
    project = _project(tmp_path / "p", "user-trtllm-mha", text)
    run = forgepatch("apply", "--arch", "sm120", "--source", src, "--check", "--json", cwd=project)
    assert run.rc == 1
    (patch,) = run.json()["patches"]
    site = next(s for s in patch["sites"] if s["site"] == "self-check")
    bad = [loc for loc in site["locations"] if loc["status"] == "incomplete"]
    assert [loc["gate"] for loc in bad] == ["is_sm100_supported() or self.enable_dp_attention"], site
    # the other models' gates are still the declared exceptions
    assert any(loc["status"] == "ignored" and "within" in loc["detail"] for loc in site["locations"])
