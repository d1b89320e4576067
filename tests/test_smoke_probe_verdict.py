"""A failing probe job is reported with the probe's own verdict and reason, not as a bare
``exit code N`` at phase ``probe verdict`` (what the first real smoke run on an H200 showed).

The logs and documents here are real ones from the lent GPU machines (docs/gpu-runs/); the
end-to-end case runs ``forgepatch smoke --runner local`` against tests/support/fake_torch, a
named test double of torch.
"""

from __future__ import annotations

import json
from pathlib import Path

from forgepatch.inimage.monitor import extract_json
from forgepatch.smoke.jobs import JobSpec, RunOutcome
from forgepatch.smoke.verdict import judge
from forgepatch.inimage.monitor import triage_lines
from support.smoke_matrix import run_cli

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs" / "gpu-runs"
H200_SM120_LOG = RUNS / "2026-11-29-smoke-h200x1" / "logs" / "20261129-202641" / "sm120-v0.5.23-probe.log"
FAKE_TORCH = ROOT / "tests" / "support" / "fake_torch"


def _crash_run() -> tuple[list[str], str]:
    """The probe's stderr and JSON from the real two-H200 run with rank 1 SIGKILLed in replay."""
    log = (RUNS / "2026-11-29-h200x2.log").read_text().splitlines()
    start = next(i for i, line in enumerate(log) if line.startswith("=== inject_crash:")) + 1
    end = next((i for i in range(start, len(log)) if log[i].startswith("===")), len(log))
    return log[start:end], (RUNS / "2026-11-29-h200x2-inject-crash.json").read_text()


def test_phase_lines_parse_rank_and_verdict_fields():
    t = triage_lines(["[forgepatch-probe] phase=replay check=allreduce rank=1 begin",
                      "[forgepatch-probe] phase=done check=bmm status=pass seconds=0.5",
                      "[forgepatch-probe] phase=verdict verdict=fail seconds=10.65"])
    assert [p[0] for p in t.phases] == ["probe:replay:allreduce:begin", "probe:done:bmm", "probe:verdict:fail"]
    assert t.last_phase_label == "probe verdict fail"


def test_triage_of_the_real_incompatible_log_names_the_probes_reason():
    t = triage_lines(H200_SM120_LOG.read_text().splitlines(), log_path=str(H200_SM120_LOG))
    assert t.failed and t.exit_code == 3
    assert t.signature == "probe-incompatible"
    assert t.label.startswith("probe incompatible: NVIDIA H200 #0: sm120 image builds sm_120a kernels")
    assert t.failing_phase == "probe detect:devices"  # where it stopped, not the verdict line


def test_triage_cli_on_the_real_incompatible_log():
    res = run_cli("triage", "--json", str(H200_SM120_LOG))
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert doc["signature"] == "probe-incompatible" and "this device is sm_90" in doc["label"]
    assert doc["failing_phase"] == "probe detect:devices"


def test_judge_of_the_real_rank_crash_uses_the_failed_check():
    lines, document = _crash_run()
    text = "\n".join([*lines, *document.splitlines(), "[forgepatch] exit code=1"])
    t = triage_lines(text.splitlines())
    spec = JobSpec("sm90-p-probe-x2-crash", "sm90", "p", "probe-x2-crash", "probe", ["python3"], gpus=2)
    res = judge(spec, RunOutcome(1, False, False, "x.log", t, stdout=text))
    assert res.status == "fail" and res.verdict == "fail"
    assert res.signature == "probe-fail"
    assert res.label == "probe fail: " + extract_json(document)["reason"]
    assert res.failing_phase == "probe replay:allreduce"
    assert res.summary.startswith("probe fail: allreduce failed in phase replay")


def test_a_specific_log_signature_still_wins_over_the_probe_reason():
    doc = json.dumps({"verdict": "fail", "reason": "bmm failed in phase capture: RuntimeError", "checks": [
        {"name": "bmm", "status": "fail", "phase": "capture", "signature": "RuntimeError"}]})
    lines = ["[forgepatch-probe] phase=capture check=bmm begin",
             "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx(...)`",
             "[forgepatch-probe] phase=verdict verdict=fail seconds=1.0", doc, "[forgepatch] exit code=1"]
    t = triage_lines(lines)
    spec = JobSpec("j", "sm90", "p", "probe", "probe", ["python3"])
    res = judge(spec, RunOutcome(1, False, False, "x.log", t, stdout="\n".join(lines)))
    assert res.signature == "cublas-gemm-execution-failed" and res.failing_phase == "probe capture:bmm"


def test_smoke_local_reports_an_incompatible_probe_by_its_reason(tmp_path):
    cfg = tmp_path / "matrix.toml"
    cfg.write_text('default_pin = "p"\n[pins.p]\npypi = "0.5.23"\n[arches.sm120]\nprofiles = ["probe"]\n'
                   '[profiles.probe]\nkind = "probe"\ngpus = 1\ntimeout_s = 120\n')
    env = {"FORGEPATCH_GPUS": "0", "FORGEPATCH_CACHE_DIR": str(tmp_path / "cache"), "FAKE_TORCH_CC": "9.0",
           "FAKE_TORCH_ARCH_LIST": "sm_80 sm_90 sm_100 sm_120"}
    res = run_cli("--config", str(cfg), "smoke", "--runner", "local", "--json", "--logs", str(tmp_path / "logs"),
                  "--markdown", str(tmp_path / "t.md"), env=env, pythonpath=[FAKE_TORCH])
    assert res.returncode == 1, res.stderr
    job, = json.loads(res.stdout)["jobs"]
    assert job["status"] == "fail" and job["verdict"] == "incompatible"
    assert job["signature"] == "probe-incompatible" and job["failing_phase"] == "probe detect:devices"
    assert "sm_120a" in job["summary"] and "sm_90" in job["summary"]
    assert "**FAIL**: probe incompatible: " in (tmp_path / "t.md").read_text()
