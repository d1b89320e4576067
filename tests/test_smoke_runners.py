"""The local runner with real subprocesses: streaming, logs, JSON parsing, exit codes, and
stopping the whole process tree (its session) on timeout and after the job ends."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import threading

from forgepatch.inimage.process import follow_session, start_session
from forgepatch.smoke.runners import ProcessResult, parse_document, probe_command, probe_env, run_local


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
    assert isinstance(job, ProcessResult)
    assert job.exit_code == 3 and job.document is None and job.stdout == "not json"


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # reap it if it became our zombie (it is not our child, so normally not)
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    return False


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
    assert cmd == ["python3", "-m", "forgepatch.inimage.probe", "--json", "--gpus", "2", "--arch", "sm90",
                   "--replays", "5", "--deadline", "30.0"]
    env = probe_env({"PYTHONPATH": "/x", "NCCL_NVLS_ENABLE": "1"})
    assert env["PYTHONPATH"].split(os.pathsep)[1] == "/x"
    assert env["PYTHONPATH"].split(os.pathsep)[0].endswith("src")
    assert env["NCCL_NVLS_ENABLE"] == "1"  # an explicit choice is kept; the default is off
    assert probe_env({})["NCCL_NVLS_ENABLE"] == "0"


def test_timeout_stops_a_child_that_left_the_process_group(tmp_path):
    """A child in its own process group (as SGLang's server is) is still in the job's session."""
    pidfile = tmp_path / "child.pid"
    job = run_local(py(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], process_group=0)
        open({str(pidfile)!r}, "w").write(f"{{child.pid}} {{os.getpgid(child.pid)}}")
        print("started", flush=True)
        time.sleep(600)
    """), timeout_s=2.0, kill_grace_s=1.0)
    assert job.timed_out and job.stdout == "started"
    child, pgid = map(int, pidfile.read_text().split())
    assert pgid == child  # it did leave the job's process group
    assert wait_gone(child), f"child {child} in its own process group survived the timeout"


def test_leftovers_holding_the_pipe_are_swept_when_the_job_ends(tmp_path):
    """The job exits but a background child keeps stdout open: the result comes at once, with
    the exit code, and the child is stopped (not waited for until the timeout)."""
    pidfile = tmp_path / "child.pid"
    t0 = time.monotonic()
    job = run_local(py(f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("bye", flush=True)
        sys.exit(4)
    """), timeout_s=60)
    assert time.monotonic() - t0 < 15
    assert job.exit_code == 4 and not job.timed_out and job.stdout == "bye"
    assert wait_gone(int(pidfile.read_text()))


def test_follow_session_cancel_event_and_merged_stream():
    """The event the smoke matrix sets on Ctrl-C stops the job like a timeout does."""
    cancel = threading.Event()
    seen = []

    def on_line(stream, line):
        seen.append((stream, line))
        cancel.set()

    proc = start_session(py("""
        import sys, time
        print("to stderr", file=sys.stderr, flush=True)
        time.sleep(600)
    """), merge_stderr=True)
    t0 = time.monotonic()
    ended = follow_session(proc, on_line=on_line, timeout_s=60, cancel=cancel, stop_grace_s=1.0)
    assert time.monotonic() - t0 < 15
    assert ended.interrupted and not ended.timed_out and ended.stopped
    assert ended.returncode is not None and ended.returncode < 0  # ended by a signal
    assert seen == [("stdout", "to stderr")]
