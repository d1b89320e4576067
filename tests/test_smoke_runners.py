"""The local runner with real subprocesses: streaming, logs, JSON parsing, exit codes, and
killing the whole process group on timeout."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

from forgepatch.smoke.runners import parse_document, probe_command, probe_env, run_local


def py(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_streams_lines_in_order_logs_them_and_parses_the_document(tmp_path):
    seen = []
    log = tmp_path / "logs" / "job.log"
    job = run_local(py("""
        import json, sys, time
        print("[forgepatch-probe] phase=capture check=bmm begin", file=sys.stderr, flush=True)
        time.sleep(0.2)
        print("[forgepatch-probe] phase=replay check=bmm begin", file=sys.stderr, flush=True)
        print(json.dumps({"verdict": "pass", "checks": [1, 2]}, indent=2))
        sys.exit(0)
    """), timeout_s=30, on_line=lambda s, l: seen.append((s, l, time.monotonic())), log_path=log)
    assert job.exit_code == 0 and not job.timed_out and not job.interrupted
    assert job.document == {"verdict": "pass", "checks": [1, 2]}
    stderr = [l for s, l, _ in seen if s == "stderr"]
    assert stderr == ["[forgepatch-probe] phase=capture check=bmm begin", "[forgepatch-probe] phase=replay check=bmm begin"]
    # streamed as they came, not at the end: the two lines arrived ~0.2 s apart
    t = [ts for s, _, ts in seen if s == "stderr"]
    assert t[1] - t[0] > 0.1
    assert job.last_phase == "replay"
    text = log.read_text()
    assert "phase=capture" in text and '"verdict": "pass"' in text


def test_exit_code_passes_through_and_missing_document_is_none():
    job = run_local(py("import sys; print('not json'); sys.exit(3)"), timeout_s=30)
    assert job.exit_code == 3 and job.document is None and job.stdout == "not json"


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    t0 = time.monotonic()
    job = run_local(py(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("[forgepatch-probe] phase=init check=allreduce rank=0 begin", file=sys.stderr, flush=True)
        time.sleep(600)
    """), timeout_s=2.0, kill_grace_s=1.0)
    assert time.monotonic() - t0 < 15
    assert job.timed_out and job.exit_code is None and job.last_phase == "init"
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        try:  # reap it if it became our zombie (it is not our child, so normally not)
            os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    else:
        raise AssertionError(f"grandchild {child} survived the timeout")


def test_sigterm_ignoring_job_is_killed():
    t0 = time.monotonic()
    job = run_local(py("""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(600)
    """), timeout_s=1.5, kill_grace_s=0.5)
    assert job.timed_out and time.monotonic() - t0 < 15
    assert job.stdout == "ready"


def test_parse_document_tolerates_chatter_before_the_document():
    doc = {"verdict": "fail", "nested": {"a": [1]}}
    assert parse_document("warning: something\n" + json.dumps(doc, indent=2)) == doc
    assert parse_document(json.dumps(doc)) == doc
    assert parse_document("") is None
    assert parse_document("[1, 2]") is None
    assert parse_document("{ broken") is None


def test_probe_command_and_env():
    cmd = probe_command(arch="sm90", gpus=2, replays=5, deadline=30.0, python="python3")
    assert cmd == ["python3", "-m", "forgepatch.smoke.probe", "--json", "--gpus", "2", "--arch", "sm90",
                   "--replays", "5", "--deadline", "30.0"]
    env = probe_env({"PYTHONPATH": "/x", "NCCL_NVLS_ENABLE": "1"})
    assert env["PYTHONPATH"].split(os.pathsep)[1] == "/x"
    assert env["PYTHONPATH"].split(os.pathsep)[0].endswith("src")
    assert env["NCCL_NVLS_ENABLE"] == "1"  # an explicit choice is kept; the default is off
    assert probe_env({})["NCCL_NVLS_ENABLE"] == "0"
