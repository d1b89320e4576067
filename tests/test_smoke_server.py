"""SGLang server tier (forgepatch.inimage.server) against the stand-in server (a labelled test
double: tests/support/fake_sglang_server.py), through the local runner and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.smoke_matrix import SCHEDULER, FAKE, ROOT, profile, processes_with, run_cli, write_matrix

DRIVER = [sys.executable, "-m", "forgepatch.inimage.server", "--model-path", "/models/fake", "--launch", f"{sys.executable} {FAKE}"]


def drive(*flags, env=None, timeout="20", extra=()):
    e = dict(os.environ, PYTHONPATH=str(ROOT / "src"), FAKE_SGLANG_STEP="0", **(env or {}))
    return subprocess.run([*DRIVER, "--timeout", timeout, *extra, "--", *flags], capture_output=True, text=True,
                          env=e, timeout=60)


def test_ready_means_capture_end_and_a_real_answer():
    r = drive("--tp-size 8")
    assert r.returncode == 0, r.stdout[-2000:]
    out = r.stdout
    assert out.index("Capture cuda graph end") < out.index("[forgepatch-server] health 200")
    assert "[forgepatch-server] answered HTTP 200" in out
    assert "[forgepatch-server] server stopped" in out and "result status=pass" in out
    assert "--tp-size 8" in out.splitlines()[0]  # the flag group reached the server's argv
    assert not processes_with(SCHEDULER)  # its child was stopped too


def test_health_ok_but_generation_failing():
    r = drive(env={"FAKE_SGLANG_FAIL": "generation"})
    assert r.returncode == 1
    assert "[forgepatch-server] generation-failed HTTP 500" in r.stdout


def test_hang_times_out_and_leaves_no_process():
    r = drive(env={"FAKE_SGLANG_FAIL": "hang", "FAKE_SGLANG_STUBBORN_CHILD": "1"}, timeout="2", extra=("--stop-grace", "1"))
    assert r.returncode == 1
    assert "[forgepatch-server] timeout after 2 s in graph capture" in r.stdout
    assert not processes_with(SCHEDULER)


def test_crash_detected_even_though_children_hold_the_pipe():
    r = drive("--ep-size 8", env={"FAKE_SGLANG_FAIL": "cublas"})
    assert r.returncode == 1
    assert "server exited code=-9 before Ready (last phase: graph capture)" in r.stdout


def test_malformed_flags_exit_2():
    r = drive("ep-size 8")
    assert r.returncode == 2 and "malformed flag group" in r.stderr and r.stderr.count("\n") == 1
    r = drive("--port 1234")
    assert r.returncode == 2 and "set by the smoke driver" in r.stderr


@pytest.fixture
def matrix(tmp_path):
    profiles = {
        "ok": profile("ok", ["--tp-size 8"], timeout_s=30),
        "gen": profile("gen", ["--tp-size 8"], env={"FAKE_SGLANG_FAIL": "generation"}),
        "hang": profile("hang", ["--tp-size 8"], timeout_s=4, env={"FAKE_SGLANG_FAIL": "hang"}),
        "ep8": profile("ep8", ["--tp-size 8", "--ep-size 8"], env={"FAKE_SGLANG_FAIL": "cublas"}),
        "arch": profile("arch", ["--enable-flashinfer-allreduce-fusion"], env={"FAKE_SGLANG_FAIL": "cuda-arch"}),
    }
    return write_matrix(tmp_path / "matrix.toml", profiles, sm103=["ok", "gen", "hang", "ep8"], sm120=["ok", "arch"])


def test_smoke_cli_local_runner_reports(matrix, tmp_path):
    junit, md = tmp_path / "junit.xml", tmp_path / "table.md"
    r = run_cli("--config", str(matrix), "smoke", "--runner", "local", "--jobs", "2", "--json", "--junit", str(junit),
                "--markdown", str(md), "--logs", str(tmp_path / "logs"), "--pin", "p23")
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("forgepatch: error: 4 of 6 smoke job(s) failed")
    doc = json.loads(r.stdout)
    by = {j["id"]: j for j in doc["jobs"]}
    assert by["sm103-p23-ok"]["status"] == "pass" and by["sm120-p23-ok"]["status"] == "pass"
    # /health was 200, the chat completion failed; the server logged why, and that root cause
    # (ranked above the generic generation-failed) names the failure, in the first request
    gen = by["sm103-p23-gen"]
    assert (gen["signature"], gen["failing_phase"], gen["last_phase"]) == ("illegal-memory-access", "first request", "server_ready")
    assert by["sm103-p23-hang"]["status"] == "timeout" and by["sm103-p23-hang"]["failing_phase"] == "graph capture"
    ep8 = by["sm103-p23-ep8"]
    assert (ep8["label"], ep8["failing_phase"]) == ("CUBLAS_STATUS_EXECUTION_FAILED", "graph capture")
    assert by["sm120-p23-arch"]["signature"] == "cuda-arch-unsupported"
    # the kept log is the job's, and triage finds the same thing in it
    log = ep8["log_path"]
    t = run_cli("triage", log, "--json")
    assert json.loads(t.stdout)["error_lineno"] == ep8["error_lineno"]
    table = md.read_text()
    assert table.startswith("| arch | pin | ok | gen | hang | ep8 | arch |\n")
    assert "**FAIL**: CUBLAS_STATUS_EXECUTION_FAILED in graph capture" in table
    assert "| sm120 | p23 | pass | - | - | - | **FAIL**: No supported CUDA architectures found" in table
    import xml.etree.ElementTree as ET

    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "6" and suite.get("failures") == "4"
    assert not processes_with(SCHEDULER)
