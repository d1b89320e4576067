"""The docker runner end to end on a real engine and a real image: probe verdict, the server
tier inside a container (network none) against the stand-in server (a labelled test double),
timeouts, Ctrl-C, and 50 jobs with injected failures leaving nothing behind."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from support.smoke_matrix import CLI, FAKE, ROOT, profile, processes_with, run_cli, write_matrix

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def smoke_image(docker_client, base_image):
    """A minimal image: the base + forgepatch's sources + the stand-in server (not the real
    image builder, which lives in forgepatch.images)."""
    tag = f"forgepatch-test/smoke:{uuid.uuid4().hex[:8]}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(ROOT / "src" / "forgepatch", "forgepatch", filter=lambda t: None if "__pycache__" in t.name else t)
        tar.add(FAKE, "fake_sglang_server.py")
        dockerfile = (f"FROM {base_image}\nCOPY forgepatch /opt/fp/forgepatch\nCOPY fake_sglang_server.py /opt/fake_sglang_server.py\n"
                      "ENV PYTHONPATH=/opt/fp\n").encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    buf.seek(0)
    docker_client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True)
    yield tag
    docker_client.images.remove(tag, force=True)


def containers(client, label="forgepatch.smoke"):
    return client.containers.list(all=True, filters={"label": label})


@pytest.fixture
def no_leftovers(docker_client):
    before = {c.id for c in containers(docker_client)}
    yield
    left = [c.name for c in containers(docker_client) if c.id not in before]
    assert left == [], f"containers left behind: {left}"


def docker_matrix(tmp_path, profiles, **kw):
    return write_matrix(tmp_path / "matrix.toml", profiles, python="python3", smoke_extra="", **kw).read_text().replace(
        str(FAKE), "/opt/fake_sglang_server.py")


def test_probe_in_container_says_no_gpu(smoke_image, tmp_path, no_leftovers):
    cfg = tmp_path / "m.toml"
    cfg.write_text(docker_matrix(tmp_path, {"probe": profile("probe", kind="probe", gpus=0, timeout_s=120)}, sm103=["probe"]))
    r = run_cli("--config", str(cfg), "smoke", "--runner", "docker", "--image", smoke_image, "--pin", "p23", "--json")
    # its only required job skipped: nothing was tested, which is not a pass (exit 1, one line)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("forgepatch: error: all 1 required smoke job(s) skipped, nothing was tested")
    job = json.loads(r.stdout)["jobs"][0]
    assert job["verdict"] == "no-gpu" and job["status"] == "skipped" and job["exit_code"] == 3


def test_server_tier_in_container_network_none(smoke_image, tmp_path, no_leftovers):
    cfg = tmp_path / "m.toml"
    cfg.write_text(docker_matrix(tmp_path, {
        "ok": profile("ok", ["--tp-size 8"], timeout_s=60),
        "ep8": profile("ep8", ["--tp-size 8", "--ep-size 8"], timeout_s=60,
                       env={"FAKE_SGLANG_FAIL_IF": "--ep-size 8", "FAKE_SGLANG_FAIL": "cublas"}),
    }, sm103=["ok", "ep8"]))
    r = run_cli("--config", str(cfg), "smoke", "--image", smoke_image, "--pin", "p23", "--json", "--jobs", "2",
                "--logs", str(tmp_path / "logs"))
    assert r.returncode == 1, r.stderr
    by = {j["profile"]: j for j in json.loads(r.stdout)["jobs"]}
    assert by["ok"]["status"] == "pass", by["ok"]
    assert (by["ep8"]["label"], by["ep8"]["failing_phase"]) == ("CUBLAS_STATUS_EXECUTION_FAILED", "graph capture")
    log = Path(by["ok"]["log_path"]).read_text()
    assert "[forgepatch-server] answered HTTP 200" in log and "[forgepatch] exit code=0" in log


def test_network_none_unless_profile_says_so(docker_client, smoke_image, tmp_path, no_leftovers):
    from forgepatch.smoke.docker_runner import DockerRunner
    from forgepatch.smoke.jobs import JobSpec
    from forgepatch.smoke.matrix import run_jobs

    cmd = ["python3", "-c", "import socket; print('ifaces', sorted(n for _, n in socket.if_nameindex()))"]
    specs = [JobSpec("off", "sm90", "p", "off", "command", cmd, smoke_image, timeout_s=30),
             JobSpec("on", "sm90", "p", "on", "command", cmd, smoke_image, network=True, timeout_s=30)]
    runner = DockerRunner(docker_client)
    res = {r.id: r for r in run_jobs(specs, runner, tmp_path)}
    assert "ifaces ['lo']" in Path(res["off"].log_path).read_text()
    assert res["on"].status == "pass" and runner.leftovers() == []


def test_timeout_kills_and_removes(docker_client, smoke_image, tmp_path, no_leftovers):
    from forgepatch.smoke.docker_runner import DockerRunner
    from forgepatch.smoke.jobs import JobSpec
    from forgepatch.smoke.matrix import run_jobs

    spec = JobSpec("hang", "sm90", "p", "hang", "command", ["sh", "-c", "echo Capture cuda graph begin; sleep 600"],
                   smoke_image, timeout_s=2)
    t0 = time.monotonic()
    (res,) = run_jobs([spec], DockerRunner(docker_client), tmp_path)
    assert time.monotonic() - t0 < 30
    assert res.status == "timeout" and res.failing_phase == "graph capture" and res.last_phase == "capture_begin"
    assert "[forgepatch] timeout after 2 s" in Path(res.log_path).read_text()


def test_ctrl_c_removes_containers(docker_client, smoke_image, tmp_path, no_leftovers):
    cfg = tmp_path / "m.toml"
    cfg.write_text(docker_matrix(tmp_path, {
        "slow": profile("slow", kind="command", command="sh -c 'echo started; sleep 600'", timeout_s=600),
        "slow2": profile("slow2", kind="command", command="sh -c 'sleep 600'", timeout_s=600),
    }, sm103=["slow", "slow2"]))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([*CLI, "--config", str(cfg), "smoke", "--image", smoke_image, "--pin", "p23", "--jobs", "2"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len([c for c in containers(docker_client) if c.status == "running"]) < 2:
        time.sleep(0.2)
    assert len(containers(docker_client)) == 2
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (err, out)
    assert containers(docker_client) == []


def test_sigkilled_owner_containers_are_reaped(docker_client, smoke_image, tmp_path, no_leftovers):
    from forgepatch.smoke.docker_runner import LABEL, OWNER, DockerRunner

    dead = subprocess.Popen(["true"])
    dead.wait()
    import socket

    docker_client.containers.create(smoke_image, ["sleep", "600"], labels={LABEL: "x", OWNER: f"{socket.gethostname()}:{dead.pid}"})
    assert DockerRunner(docker_client).reap_stale() == 1


def test_fifty_jobs_with_failures_and_timeouts_leave_nothing(docker_client, smoke_image, tmp_path, no_leftovers):
    from forgepatch.smoke.docker_runner import DockerRunner
    from forgepatch.smoke.jobs import JobSpec
    from forgepatch.smoke.matrix import run_jobs

    token = f"fp-stray-{uuid.uuid4().hex[:8]}"
    shapes = {
        "pass": f"echo ok {token}",
        "exit": f"echo {token}; exit 3",
        "cublas": f"echo 'RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmStridedBatchedEx' {token}; exit 1",
        "child": f"(sh -c 'sleep 600; : {token}' &) ; echo Capture cuda graph begin; exit 1",
        "timeout": f"echo Load weight begin; sh -c 'sleep 600; : {token}'",
    }
    specs = []
    for i in range(50):
        shape = list(shapes)[i % len(shapes)]
        specs.append(JobSpec(f"j{i:02d}-{shape}", "sm90", "p", shape, "command", ["sh", "-c", shapes[shape]], smoke_image,
                             timeout_s=3 if shape == "timeout" else 60))
    runner = DockerRunner(docker_client)
    t0 = time.monotonic()
    results = run_jobs(specs, runner, tmp_path, parallel=10)
    took = time.monotonic() - t0
    status = {}
    for r in results:
        status.setdefault(r.profile, set()).add(r.status)
    assert status == {"pass": {"pass"}, "exit": {"fail"}, "cublas": {"fail"}, "child": {"fail"}, "timeout": {"timeout"}}
    assert {r.label for r in results if r.profile == "cublas"} == {"CUBLAS_STATUS_EXECUTION_FAILED"}
    assert runner.leftovers() == []
    assert processes_with(token) == []
    print(f"50 docker jobs in {took:.1f} s")
