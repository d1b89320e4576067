"""Monitor + triage on SGLang-format logs: every signature and phase.

The logs come from the stand-in server (tests/support/fake_sglang_server.py, a labelled test
double that writes SGLang's real markers), run once per failure shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forgepatch.inimage.monitor import LineSplitter, Monitor, triage_lines

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "support" / "fake_sglang_server.py"
CLI = [sys.executable, "-c", "import sys; from forgepatch.cli import main; sys.exit(main())"]


def fake_log(shape: str, tmp: Path) -> tuple[Path, int]:
    env = dict(os.environ, FAKE_SGLANG_FAIL=shape, FAKE_SGLANG_STEP="0")
    proc = subprocess.run([sys.executable, str(FAKE), "--model-path", "/models/x", "--port", "0", "--tp-size", "8"],
                          capture_output=True, text=True, env=env, timeout=30)
    path = tmp / f"{shape}.log"
    path.write_text(proc.stdout + proc.stderr)
    return path, proc.returncode


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("logs")
    shapes = ["cublas", "illegal-memory", "nccl", "oom", "cuda-arch", "sigquit", "traceback", "exit", "watchdog"]
    out = {s: fake_log(s, tmp) for s in shapes}
    # the stand-in's children die with it (os._exit/kill): nothing of ours may linger
    return out


# shape -> (signature, label contains, failing phase, last phase, error line contains)
EXPECT = {
    "cublas": ("cublas-gemm-execution-failed", "CUBLAS_STATUS_EXECUTION_FAILED", "graph capture", "capture_begin", "cublasGemmStridedBatchedEx"),
    "illegal-memory": ("illegal-memory-access", "illegal memory access", "graph capture", "capture_begin",
                       "an illegal memory access was encountered"),
    "nccl": ("nccl-error", "NCCL error", "initialisation", "args", "DistBackendError: NCCL error"),
    "oom": ("oom", "out of memory", "weight loading", "load_begin", "CUDA out of memory"),
    "cuda-arch": ("cuda-arch-unsupported", "No supported CUDA architectures found for major versions [9, 10]",
                  "graph capture", "capture_begin", "major versions [9, 10]"),
    "sigquit": ("sigquit", "sigquit", "graph capture", "capture_begin", "Received sigquit from a child process"),
    "traceback": ("traceback", "ValueError: Unsupported MoE runner backend", "weight loading", "load_begin",
                  "ValueError: Unsupported MoE runner backend"),
    "watchdog": ("watchdog", "watchdog timeout", "first request", "server_ready", "Scheduler watchdog timeout"),
}


@pytest.mark.parametrize("shape", sorted(EXPECT))
def test_each_signature_phase_and_error_line(logs, shape):
    path, code = logs[shape]
    sig, label, phase, last, needle = EXPECT[shape]
    lines = path.read_text().splitlines()
    t = triage_lines(lines, log_path=str(path), exit_code=code)
    assert t.failed
    assert t.signature == sig, t.to_dict()
    assert label in t.label
    assert t.failing_phase == phase
    assert t.last_phase == last
    assert needle in t.error_line
    # the line number is the file's own (1-based), and the error is NOT the last line
    assert lines[t.error_lineno - 1].startswith(t.error_line[:60])
    if shape != "sigquit":  # that log ends with its only error line
        assert t.error_lineno < len(lines)
    assert any(no == t.error_lineno for no, _ in t.context)
    assert t.exit_code == code != 0


def test_cublas_outranks_its_wrappers(logs):
    t = triage_lines(logs["cublas"][0].read_text().splitlines())
    # the "Capture cuda graph failed" wrapper, the traceback and the parent's sigquit are also there
    assert {"capture-failed", "traceback", "sigquit"} <= set(t.also_seen)
    assert t.summary.startswith("CUBLAS_STATUS_EXECUTION_FAILED in graph capture (line ")


def test_plain_nonzero_exit_without_message(logs):
    path, code = logs["exit"]
    t = triage_lines(path.read_text().splitlines(), exit_code=code)
    assert code == 3 and t.failed and t.signature == "exit" and t.label == "exit code 3"
    assert t.failing_phase == "weight loading"


def test_benign_exception_word_is_not_an_error():
    lines = [
        "[2026-01-01 00:00:00] INFO: no custom Exception handler configured; Exception hooks disabled",
        "[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/m')",
        "[2026-01-01 00:00:01 TP0] Load weight begin. avail mem=70 GB",
        "[2026-01-01 00:00:02 TP0] Load weight end. type=X",
    ]
    t = triage_lines(lines)
    assert not t.failed and t.signature is None and t.last_phase == "load_end"


def test_error_survived_by_later_progress_is_not_the_verdict():
    lines = [
        "[t] server_args=ServerArgs(model_path='/m')",
        "[t TP0] Load weight begin.",
        "Traceback (most recent call last):",
        '  File "/x/optional.py", line 3, in <module>',
        "    import triton_kernels",
        "ModuleNotFoundError: No module named 'triton_kernels'",
        "[t TP0] Load weight end.",
        "[t TP0] KV Cache is allocated. #tokens: 1000",
        "[t TP0] Capture cuda graph begin.",
        "[t TP3] RuntimeError: CUDA error: an illegal memory access was encountered",
        "[t] shutting down",
    ]
    t = triage_lines(lines)
    assert t.signature == "illegal-memory-access" and t.error_lineno == 10
    assert "traceback" in t.recovered
    ok = triage_lines(lines[:8])
    assert not ok.failed and ok.recovered == ["module-not-found", "traceback"]  # both name the survived import error


def test_last_exception_of_chained_traceback(logs):
    t = triage_lines(logs["traceback"][0].read_text().splitlines())
    assert t.label.startswith("ValueError")  # not the KeyError it was raised while handling
    assert "KeyError" not in t.label


def test_pin_marker_overrides():
    lines = ["[t] ARGS PARSED", "[t] weights: loading", "[t] graphs: capturing", "RuntimeError: CUDA error: an illegal memory access was encountered"]
    markers = {"args": r"ARGS PARSED", "load_begin": r"weights: loading", "capture_begin": r"graphs: capturing"}
    t = triage_lines(lines, markers)
    assert [p[0] for p in t.phases] == ["args", "load_begin", "capture_begin"]
    assert t.failing_phase == "graph capture"
    with pytest.raises(ValueError, match="unknown marker"):
        Monitor({"no-such-marker": "x"})
    with pytest.raises(ValueError, match="bad regex"):
        Monitor({"args": "("})


def test_probe_phase_lines():
    lines = [
        "[forgepatch-probe] phase=import begin",
        "[forgepatch-probe] phase=capture check=bmm begin",
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmStridedBatchedEx(...)`",
    ]
    t = triage_lines(lines, exit_code=1)
    assert t.last_phase == "probe:capture:bmm:begin"
    assert t.failing_phase == "probe capture:bmm" and t.label == "CUBLAS_STATUS_EXECUTION_FAILED"


def test_server_tier_lines_and_timeout_trailer():
    t = triage_lines(["[t] Capture cuda graph begin.", "[forgepatch-server] timeout after 5 s in graph capture",
                      "[forgepatch] exit code=1"])
    assert t.signature == "timeout" and t.failed and t.exit_code == 1 and t.failing_phase == "graph capture"
    g = triage_lines(["[t] Capture cuda graph end.", "[forgepatch-server] generation-failed HTTP 500: boom"])
    assert g.signature == "generation-failed" and g.failing_phase == "first request" and "HTTP 500" in g.label


def test_line_splitter_reassembles_chunks():
    s = LineSplitter()
    assert s.push(b"Load wei") == []
    assert s.push(b"ght begin\nKV Ca") == ["Load weight begin"]
    assert s.push(b"che is allocated\n") == ["KV Cache is allocated"]
    assert s.flush() == []
    assert s.push(b"tail") == [] and s.flush() == ["tail"]


def test_feed_reports_events_as_lines_arrive():
    seen = []
    m = Monitor(on_event=seen.append)
    m.feed("[t] Capture cuda graph begin.")
    assert [e.id for e in seen] == ["capture_begin"]
    m.feed("CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmStridedBatchedEx`")
    # the specific field signature and the generic one it refines both fire; ranking decides later
    assert [(e.kind, e.id, e.lineno) for e in seen[1:]] == [
        ("error", "cublas-gemm-execution-failed", 2), ("error", "cublas", 2)]


# -- the CLI -------------------------------------------------------------------------------------
def run_cli(*args, stdin=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([*CLI, *args], capture_output=True, text=True, input=stdin, env=env, cwd=ROOT, timeout=60)


def test_triage_cli_file_stdin_json(logs):
    path, _ = logs["cublas"]
    r = run_cli("triage", str(path))
    assert r.returncode == 1
    assert "CUBLAS_STATUS_EXECUTION_FAILED" in r.stdout and "graph capture" in r.stdout
    assert "first error:   line" in r.stdout and ">" in r.stdout
    r = run_cli("triage", "-", "--json", stdin=path.read_text())
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["signature"] == "cublas-gemm-execution-failed" and doc["failing_phase"] == "graph capture"
    assert doc["error_lineno"] == next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if "CUBLAS_STATUS" in ln)
    # no failure but no evidence of health either: unverified, exit 1 (issue 24: unknown is never ok)
    unverified = run_cli("triage", "-", stdin="[t] server_args=ServerArgs(x)\n[t] Load weight begin.\n")
    assert unverified.returncode == 1 and "no failure signature" in unverified.stdout
    assert "unverified" in unverified.stdout
    ok = run_cli("triage", "-", stdin="[t] server_args=ServerArgs(x)\n[t] The server is fired up and ready to roll!\n")
    assert ok.returncode == 0 and "no failure signature" in ok.stdout and "ok (server reported ready" in ok.stdout


def test_triage_cli_bad_input():
    r = run_cli("triage", "/nonexistent/log.txt")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot read log" in r.stderr
