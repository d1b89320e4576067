"""Matrix job set (include/exclude, filters, shards), the GitHub matrix emitter, bad input,
and 50 local jobs leaving no stray process."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from forgepatch.config import load_matrix
from forgepatch.smoke.jobs import JobSpec
from forgepatch.smoke.local_runner import LocalRunner
from forgepatch.smoke.matrix import run_jobs, select
from support.smoke_matrix import profile, processes_with, run_cli, write_matrix


@pytest.fixture
def cfg(tmp_path):
    profiles = {n: profile(n, ["--tp-size 8"]) for n in ("tp8", "ep8", "probe")}
    extra = """
[[smoke.exclude]]
profile = "ep8"

[[smoke.include]]
arch = "sm103"
pin = "p23"
profile = "ep8"
"""
    return write_matrix(tmp_path / "matrix.toml", profiles, sm103=["probe", "tp8", "ep8"], sm120=["probe"], smoke_extra=extra)


def test_include_exclude_like_github(cfg):
    m = load_matrix(cfg)
    got = m.combos()
    assert ("sm103", "p20", "ep8") not in got  # excluded ...
    assert ("sm103", "p23", "ep8") in got  # ... and included back for one pin
    assert ("sm120", "p20", "probe") not in got  # arches.sm120.pins = ["p23"]
    assert len(got) == 2 * 2 + 1 + 1
    assert select(m, arch="sm120") == [("sm120", "p23", "probe")]
    shards = [select(m, shard=(i, 3)) for i in (1, 2, 3)]
    assert sorted(sum(shards, [])) == sorted(got) and all(shards)


def test_github_matrix_and_shards(cfg):
    r = run_cli("--config", str(cfg), "matrix", "--format", "github")
    full = json.loads(r.stdout)["include"]
    assert r.returncode == 0 and len(full) == 6
    assert {"name", "arch", "pin", "profile", "gpus", "required", "source"} <= set(full[0])
    parts = [json.loads(run_cli("--config", str(cfg), "matrix", "--format", "github", "--shard", f"{i}/2").stdout)["include"]
             for i in (1, 2)]
    assert [e["name"] for e in parts[0] + parts[1]] and sorted(e["name"] for e in parts[0] + parts[1]) == sorted(e["name"] for e in full)
    images = json.loads(run_cli("--config", str(cfg), "matrix", "--by", "image").stdout)["include"]
    assert {(e["arch"], e["pin"]) for e in images} == {("sm103", "p23"), ("sm103", "p20"), ("sm120", "p23")}


@pytest.mark.parametrize("args, needle", [
    (["smoke", "--profile", "nope"], "unknown profile 'nope'"),
    (["smoke", "--arch", "sm90"], "'sm90' is not configured"),
    (["matrix", "--shard", "3/2"], "needs 1 <= I <= N"),
    (["matrix", "--shard", "x"], "is not I/N"),
    (["matrix", "--format", "gitlab"], "not supported"),
    (["smoke", "--runner", "podman", "--profile", "tp8"], "not docker or local"),
])
def test_bad_input_one_line_exit_2(cfg, args, needle):
    r = run_cli("--config", str(cfg), *args)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_malformed_flags_in_config(tmp_path):
    bad = write_matrix(tmp_path / "m.toml", {"x": profile("x", ["ep-size 8"])}, sm103=["x"])
    r = run_cli("--config", str(bad), "smoke", "--runner", "local")
    assert r.returncode == 2 and "malformed flag group 'ep-size 8'" in r.stderr and r.stderr.count("\n") == 1


def test_gpus_asked_where_none_exist(tmp_path):
    m = write_matrix(tmp_path / "m.toml", {"tp8": profile("tp8", ["--tp-size 8"], gpus=8)}, sm103=["tp8"])
    for runner in ("local", "docker"):
        r = run_cli("--config", str(m), "smoke", "--runner", runner, env={"FORGEPATCH_GPUS": "none"})
        assert r.returncode == 2, r.stderr
        assert "asks for 8 GPU(s)" in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.docker
def test_image_missing(tmp_path, docker_client):
    m = write_matrix(tmp_path / "m.toml", {"ok": profile("ok", ["--tp-size 1"])}, sm103=["ok"])
    r = run_cli("--config", str(m), "smoke", "--image", "forgepatch-test/absent:nope", "--pin", "p23")
    assert r.returncode == 2 and "not found in the local Docker engine" in r.stderr and r.stderr.count("\n") == 1


def test_unknown_marker_override_is_bad_input(tmp_path):
    m = write_matrix(tmp_path / "m.toml", {"ok": profile("ok", ["--tp-size 1"])}, sm103=["ok"])
    m.write_text(m.read_text().replace('[pins.p23]\npypi = "0.5.23"', '[pins.p23]\npypi = "0.5.23"\nmarkers = { bogus = "x" }'))
    r = run_cli("--config", str(m), "smoke", "--runner", "local", "--pin", "p23")
    assert r.returncode == 2 and "pins.p23.markers: unknown marker 'bogus'" in r.stderr


def test_fifty_local_jobs_leave_no_stray_process(tmp_path):
    token = f"fp-local-{uuid.uuid4().hex[:8]}"
    bg = f"sh -c 'sleep 600; : {token}'"  # a process whose command line carries the token
    shapes = {
        "pass": f"echo {token}",
        "exit": f"echo {token}; exit 3",
        "orphan": f"{bg} & echo Capture cuda graph begin; exit 1",
        "stubborn": f"trap '' TERM; {bg} & echo Load weight begin; sleep 600",
        "timeout": f"echo Load weight begin; {bg}",
    }
    specs = [JobSpec(f"j{i:02d}-{s}", "sm90", "p", s, "command", ["sh", "-c", shapes[s]],
                     timeout_s=1.5 if s in ("timeout", "stubborn") else 30)
             for i, s in ((i, list(shapes)[i % 5]) for i in range(50))]
    results = run_jobs(specs, LocalRunner(stop_grace_s=0.5), tmp_path, parallel=10, gpus=[])
    status = {}
    for r in results:
        status.setdefault(r.profile, set()).add(r.status)
    assert status == {"pass": {"pass"}, "exit": {"fail"}, "orphan": {"fail"}, "stubborn": {"timeout"}, "timeout": {"timeout"}}
    assert processes_with(token) == []


def test_stray_check_sees_a_real_stray():
    import subprocess
    token = f"fp-probe-{uuid.uuid4().hex[:8]}"
    p = subprocess.Popen(["sh", "-c", f"sleep 600; : {token}"])
    try:
        # the child shows its own command line once it has exec'd; while sh forks sleep, its
        # child briefly carries the same command line, so wait for exactly one
        deadline = time.monotonic() + 10
        while len(processes_with(token)) != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(processes_with(token)) == 1
    finally:
        p.kill()
        p.wait()
