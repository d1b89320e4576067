"""The shipped workflow (docs/ci/smoke.yml) releases a fork, end to end, run as a runner runs
it (tests/support/actions_runner.py: the jobs' steps in order, bash with the workflow's shell
options, env, outputs, artifacts): a fork repository of its own with a bare git remote, the
real registry, forgepatch installed from a wheel the way the workflow's install step names it
(the FORGEPATCH_REQUIREMENT variable; PyPI is the default), images built and pushed, smoke on a
runner without a GPU (the probe skips; a command profile passes), merged, released; then a
second nightly run after the maintainer adds an arch. The ledger is committed by the release
job, so the chain continues, and a third, plain clone verifies every release."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
import venv
from pathlib import Path

import pytest
import yaml

from support.actions_runner import SHELLS, Runner
from support.release_world import VERSION, cli, git, upstream_repo

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "docs" / "ci" / "smoke.yml"
PIN = "p23"

MATRIX = """\
default_pin = "{pin}"

[pins.{pin}]
pypi = "{version}"

[arches.sm120]
patches = ["sm120-flashinfer-allreduce-fusion"]
base_image = "{base}"
profiles = ["probe", "ok"]
{more}
[profiles.probe]
kind = "probe"
gpus = 0
timeout_s = 120
required = false

[profiles.ok]
kind = "command"
command = "python3 -c 'print(42)'"
gpus = 0
timeout_s = 60

[smoke]
image_repo = "{repo}"

[release]
tag_template = "forgepatch/{{pin}}/{{arch}}"
ledger = "releases/ledger.json"
"""
SM103 = """
[arches.sm103]
patches = ["sm103-ep-cuda-graph-guard"]
base_image = "{base}"
profiles = ["probe", "ok"]
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A venv (the runner's Python) and the forgepatch wheel built from this checkout: the
    requirement the workflow installs (a released forgepatch would be `forgepatch==X` from PyPI)."""
    root = tmp_path_factory.mktemp("wf-python")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", root / "dist", ROOT],
                   check=True, capture_output=True)
    wheel = next((root / "dist").glob("forgepatch-*.whl"))
    env_dir = root / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(env_dir)
    return env_dir, wheel


def runner_env(env_dir: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    env["FORGEPATCH_GPUS"] = "none"  # a runner without GPUs, whatever this host has
    return env


def test_workflow_shell_is_pipefail_bash():
    """A failure piped through `tee` fails the step under the workflow's shell (GitHub's own
    command line for `shell: bash`), and would not under the default `bash -e`."""
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert doc["defaults"]["run"]["shell"] == "bash"
    for shell, rc in (("bash", 1), (None, 0)):
        p = subprocess.run([*SHELLS[shell], "-c", "false | tee /dev/null"], capture_output=True)
        assert p.returncode == rc
    jobs = doc["jobs"]
    assert all(j.get("defaults") is None for j in jobs.values())  # no job overrides it
    assert doc["concurrency"]["cancel-in-progress"] is False and "forgepatch-release" in doc["concurrency"]["group"]
    installs = [s["run"] for j in jobs.values() for s in j["steps"] if "pip install" in s.get("run", "")]
    assert len(installs) == len(jobs) and all(r.endswith('pip install "${FORGEPATCH_REQUIREMENT}"') for r in installs)
    import forgepatch

    assert doc["env"]["FORGEPATCH_REQUIREMENT"] == f"forgepatch=={forgepatch.__version__}"  # pinned, to this release


def test_workflow_releases_a_fork_end_to_end(installed, registry, base_image, docker_client, tmp_path):
    env_dir, wheel = installed
    run_id = uuid.uuid4().hex[:8]
    env = runner_env(env_dir, tmp_path)
    # the base image, served by the registry as a real base would be (the images job pulls it)
    base_ref = registry.repo(f"forgepatch-test/wf-base-{run_id}") + ":bookworm"
    repo_name, tag = base_ref.rsplit(":", 1)
    docker_client.images.get(base_image).tag(repo_name, tag)
    made: set[str] = set()
    try:
        for _ in docker_client.api.push(repo_name, tag=tag, stream=True, decode=True):
            pass
        docker_client.images.remove(base_ref)  # untag: the workflow's `docker pull` brings it back
        image_repo = registry.repo(f"forgepatch-test/wf-{run_id}")
        _run(tmp_path, env, wheel, base_ref, image_repo, made)
    finally:
        for image_id in made:
            try:
                docker_client.images.remove(image_id, force=True)
            except Exception:  # noqa: BLE001 - gone already
                pass
        try:
            docker_client.images.remove(base_ref)  # the tag only; the base image stays
        except Exception:  # noqa: BLE001
            pass
        # the push and the pull left a registry digest on the shared base image: later builds over
        # it would warn that it is a moving tag. Remove that reference only (the image stays).
        for ref in docker_client.api.inspect_image(base_image).get("RepoDigests") or []:
            if ref.startswith(repo_name + "@"):
                try:
                    docker_client.images.remove(ref)
                except Exception:  # noqa: BLE001
                    pass
        assert not [r for r in docker_client.api.inspect_image(base_image).get("RepoDigests") or []
                    if r.startswith(repo_name + "@")]


def _run(tmp_path: Path, env: dict[str, str], wheel: Path, base_ref: str, image_repo: str, made: set[str]) -> None:
    # -- the maintainer's fork: SGLang sources, matrix.toml, the workflow, a fork branch --------
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    fork = upstream_repo(tmp_path / "maintainer")
    fmt = dict(pin=PIN, version=VERSION, base=base_ref, repo=image_repo)
    (fork / "matrix.toml").write_text(MATRIX.format(**fmt, more=""))
    (fork / ".github" / "workflows").mkdir(parents=True)
    # the fork's own requirement: the wheel of this checkout where a fork would name a release
    ours = WORKFLOW.read_text().replace('FORGEPATCH_REQUIREMENT: "forgepatch==0.1.0"', f'FORGEPATCH_REQUIREMENT: "{wheel}"')
    assert str(wheel) in ours
    (fork / ".github" / "workflows" / "smoke.yml").write_text(ours)
    git(fork, "add", "matrix.toml", ".github")
    git(fork, "commit", "-q", "-m", "forgepatch matrix and workflow")
    fork_branch(fork, "sm120")
    git(fork, "remote", "add", "origin", str(remote))
    git(fork, "push", "-q", "origin", "main", "refs/heads/forgepatch/*:refs/heads/forgepatch/*")
    workflow = yaml.safe_load(ours)
    variables: dict[str, str] = {}

    # -- nightly 1 ------------------------------------------------------------------------------
    first = Runner(workflow, str(remote), tmp_path / "run1", env, event="schedule", vars=variables)
    runs = first.run()
    made.update(_built(first))
    _assert_all_green(runs)
    # the follow job: the fork's pin names the newest release already or gets it as a pin
    follow = json.loads((first.artifacts / "follow" / "follow.json").read_text())
    assert follow["pin"] and runs["follow"][0].outputs["drift"] in ("true", "false")
    (images,) = [json.loads(runs["plan"][0].outputs["images"])]
    assert [(i["arch"], i["pin"]) for i in images["include"]] == [("sm120", PIN)]
    # the test base has no CUDA library: --audit says so instead of a silent pass
    assert "warning: kernel audit of" in "\n".join(runs["images"][0].logs)
    assert "no CUDA library in the image" in "\n".join(runs["images"][0].logs)
    merged = json.loads((first.artifacts / "smoke-results" / "smoke-results.json").read_text())
    by = {j["profile"]: j for j in merged["jobs"]}
    assert by["probe"]["status"] == "skipped" and by["probe"]["verdict"] == "no-gpu"  # no GPU on this runner
    assert by["ok"]["status"] == "pass" and merged["summary"]["ok"] is True
    release = json.loads((first.artifacts / "release-report" / "release.json").read_text())
    assert [(c["arch"], c["status"]) for c in release["combinations"]] == [("sm120", "released")]
    # the release read the fork branch from its remote-tracking ref: the checkout had no local one
    ws = runs["release"][0].workspace
    assert git(ws, "branch", "--list", "forgepatch/*") == ""
    assert "origin/forgepatch/sm120/p23" in git(ws, "branch", "-r")

    # the ledger and the tag are in the remote: committed on main, pushed together
    ledger1 = json.loads(git(remote, "show", "main:releases/ledger.json"))["releases"]
    assert [e["tag"] for e in ledger1] == [f"forgepatch/{PIN}/sm120"] and ledger1[0]["prev"] == ""
    assert git(remote, "tag", "-l", "forgepatch/*").split() == [f"forgepatch/{PIN}/sm120"]
    assert not any(p.endswith(".lock") for p in git(remote, "ls-tree", "-r", "--name-only", "main").split())

    # -- the maintainer adds an arch between the nightlies ----------------------------------------
    git(fork, "pull", "-q", "--ff-only", "origin", "main")
    (fork / "matrix.toml").write_text(MATRIX.format(**fmt, more=SM103.format(base=base_ref)))
    git(fork, "commit", "-q", "-am", "add sm103")
    fork_branch(fork, "sm103")
    git(fork, "push", "-q", "origin", "main", "refs/heads/forgepatch/*:refs/heads/forgepatch/*")

    # -- nightly 2: the first release is unchanged, sm103 is released, the chain continues ------
    second = Runner(workflow, str(remote), tmp_path / "run2", env, event="schedule", vars=variables)
    runs = second.run()
    made.update(_built(second))
    _assert_all_green(runs)
    release = json.loads((second.artifacts / "release-report" / "release.json").read_text())
    assert sorted((c["arch"], c["status"]) for c in release["combinations"]) == [("sm103", "released"), ("sm120", "unchanged")]
    ledger2 = json.loads(git(remote, "show", "main:releases/ledger.json"))["releases"]
    assert ledger2[0] == ledger1[0] and len(ledger2) == 2
    assert ledger2[1]["tag"] == f"forgepatch/{PIN}/sm103" and ledger2[1]["prev"] == ledger1[0]["digest"]

    # -- a third clone, as anyone checks a release: verify and status pass ----------------------
    third = tmp_path / "third"
    subprocess.run(["git", "clone", "-q", str(remote), str(third)], check=True)
    assert git(third, "branch", "--list", "forgepatch/*") == ""  # remote-tracking fork branches only
    for arch in ("sm120", "sm103"):
        v = subprocess.run(["forgepatch", "verify", f"forgepatch/{PIN}/{arch}", "--json"], cwd=third, env=env,
                           capture_output=True, text=True, timeout=300)
        assert v.returncode == 0, v.stdout + v.stderr
        checks = {c["check"] for c in json.loads(v.stdout)["checks"]}
        assert {"ledger", "chain", "tag", "branch"} <= checks
    s = subprocess.run(["forgepatch", "status", "--json"], cwd=third, env=env, capture_output=True, text=True, timeout=300)
    assert s.returncode == 0, s.stderr
    doc = json.loads(s.stdout)
    assert doc["chain"]["ok"] is True and len(doc["combinations"]) == 2


def fork_branch(fork: Path, arch: str) -> None:
    """The maintainer's `forgepatch fork` (this checkout's forgepatch; the runner's venv gets
    its own from the workflow's install step)."""
    r = cli("fork", "--arch", arch, "--repo", ".", "--rev", f"v{VERSION}", "--pin", PIN, cwd=fork)
    assert r.returncode == 0, r.stdout + r.stderr


def _built(run: Runner) -> set[str]:
    ids = set()
    for r in run.runs.get("images", []):
        if r.workspace is not None and (r.workspace / "build.json").is_file():
            ids.add(json.loads((r.workspace / "build.json").read_text())["image_id"])
    return ids


def _assert_all_green(runs) -> None:
    bad = [(name, r.matrix, "\n".join(r.logs)[-6000:]) for name, rs in runs.items() for r in rs if r.status != "success"]
    assert not bad, bad
