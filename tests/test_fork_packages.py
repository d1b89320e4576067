"""`forgepatch fork` of a series that patches SGLang and FlashInfer (issue 23): the sglang
checkout gets `forgepatch/<arch>/<pin>` with the sglang part, the flashinfer checkout named by
the pin (`[pins.PIN.packages.flashinfer] repo` + `rev`) a branch of the same name with the
flashinfer part (the major-list codemod, the text patch on the .cu launcher), each commit with
its trailers; a drift in either package moves no branch; a pin naming flashinfer by a PyPI
release is refused before anything runs (one line, exit 2).

Real parts: the git repository of real SGLang releases (tests/support/nightlies.py), a git
checkout of the real flashinfer-python 0.6.1 and 0.7.2 release files (one commit each, tagged),
the fixture series of tests/fixtures/packages, the CLI in process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from support.forkcli import run_inprocess

FIXTURE = Path(__file__).parent / "fixtures" / "packages"
CU = "flashinfer/data/csrc/trtllm_fused_moe_kernel_launcher.cu"


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit_release(repo: Path, version: str) -> str:
    """The release's flashinfer/ (.py files and the .cu launcher, from the wheel) as one commit."""
    from forgepatch.sources import resolve_source

    tree = resolve_source(f"pypi:flashinfer-python=={version}")
    shutil.rmtree(repo / "flashinfer", ignore_errors=True)
    shutil.copytree(tree.package, repo / "flashinfer", ignore=shutil.ignore_patterns("__pycache__"))
    with zipfile.ZipFile(tree.origin) as zf:
        (repo / CU).parent.mkdir(parents=True, exist_ok=True)
        (repo / CU).write_bytes(zf.read(CU))
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=FlashInfer Test Upstream", "-c", "user.email=fi@example.invalid", "commit", "-qm",
        f"flashinfer {version}")
    git(repo, "tag", f"v{version}")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def fi_upstream(tmp_path_factory):
    repo = tmp_path_factory.mktemp("fi") / "flashinfer"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    fi061, fi072 = commit_release(repo, "0.6.1"), commit_release(repo, "0.7.2")
    # a later upstream commit that renamed the all-reduce builder the series widens: drift
    git(repo, "checkout", "-q", "-b", "moved", "v0.6.1")
    comm = repo / "flashinfer" / "jit" / "comm.py"
    comm.write_text(comm.read_text().replace("def gen_trtllm_comm_module(", "def gen_comm_module_v2("))
    git(repo, "-c", "user.name=FlashInfer Test Upstream", "-c", "user.email=fi@example.invalid", "commit", "-qam",
        "rename the comm module builder")
    return repo, fi061, fi072, git(repo, "rev-parse", "HEAD")


@pytest.fixture
def project(tmp_path, nightly_clone, fi_upstream):
    """The fixture patches, a git pin of the sglang clone at v0.5.23 and of a flashinfer clone."""
    upstream, fi061, _, _ = fi_upstream
    fi = tmp_path / "fi"
    git(tmp_path, "clone", "-q", str(upstream), str(fi))
    proj = tmp_path / "proj"
    shutil.copytree(FIXTURE / "patches", proj / "patches")
    sha = git(nightly_clone, "rev-parse", "v0.5.23^{commit}")
    (proj / "matrix.toml").write_text(f"""default_pin = "p23"

[packages.flashinfer]
pypi = "flashinfer-python"
import_name = "flashinfer"
package_dir = "flashinfer"

[pins.p23]
rev = "{sha}"

[pins.p23.packages.flashinfer]
rev = "{fi061}"
repo = "{fi}"

[arches.sm120]
patches = ["sm120-flashinfer-allreduce-fusion", "fi-jit-majors", "fi-moe-launcher"]
""")
    return proj, nightly_clone, fi


def fork(capsys, proj, repo, *args):
    rc, out, err = run_inprocess(capsys, "--config", proj / "matrix.toml", "--patches", proj / "patches", "fork",
                                 "--arch", "sm120", "--repo", repo, "--json", *args)
    return rc, (json.loads(out) if out.strip() else None), err


def test_each_package_gets_its_branch_in_its_own_checkout(capsys, project, fi_upstream):
    proj, sg, fi = project
    _, fi061, fi072, moved_sha = fi_upstream
    rc, doc, err = fork(capsys, proj, sg, "--pin", "p23")
    assert rc == 0, err
    assert (doc["package"], doc["status"], doc["branch"]) == ("sglang", "created", "forgepatch/sm120/p23")
    [fdoc] = doc["packages"]
    assert (fdoc["package"], fdoc["status"], fdoc["branch"], fdoc["upstream"]) == (
        "flashinfer", "created", "forgepatch/sm120/p23", fi061)
    assert [c["patch"] for c in fdoc["commits"]] == ["fi-jit-majors", "fi-moe-launcher"]
    # the flashinfer branch: upstream + its two commits, the patched files, trailers naming the pin
    branch = "forgepatch/sm120/p23"
    assert git(fi, "rev-list", "--count", f"{fi061}..{branch}") == "2"
    assert "supported_major_versions=[9, 10, 12]" in git(fi, "show", f"{branch}:flashinfer/jit/comm.py")
    assert "TVM_FFI_ICHECK(major == 10 || major == 12)" in git(fi, "show", f"{branch}:{CU}")
    body = git(fi, "log", "-1", "--format=%B", branch)
    assert f"Forgepatch-Upstream: {fi061}" in body and "Forgepatch-Pin: p23" in body
    assert f"Forgepatch-Patchset: {fdoc['patchset']}" in body and fdoc["patchset"] != doc["patchset"]
    # the sglang branch holds no flashinfer file, the flashinfer one no sglang file
    assert all(f.startswith("python/sglang/") for c in doc["commits"] for f in c["files"])
    assert all(f.startswith("flashinfer/") for c in fdoc["commits"] for f in c["files"])
    # again: nothing moves
    rc, again, err = fork(capsys, proj, sg, "--pin", "p23")
    assert rc == 0 and again["status"] == "unchanged" and again["packages"][0]["status"] == "unchanged", err

    # the pin moves flashinfer to 0.7.2, which made both changes upstream (absorbed): its branch
    # moves to 0.7.2 with no commit, the old head kept
    matrix = proj / "matrix.toml"
    matrix.write_text(matrix.read_text().replace(fi061, fi072))
    rc, newer, err = fork(capsys, proj, sg, "--pin", "p23")
    assert rc == 0, err
    f072 = newer["packages"][0]
    assert (f072["status"], f072["upstream"], f072["commits"], git(fi, "rev-parse", branch)) == (
        "updated", fi072, [], fi072)
    assert [p["status"] for p in f072["patches"]] == ["absorbed-upstream", "absorbed-upstream"]
    # a flashinfer revision where the builder was renamed: drift there moves neither branch
    heads = (git(sg, "rev-parse", branch), git(fi, "rev-parse", branch))
    git(fi, "fetch", "-q", "origin", "moved")
    matrix.write_text(matrix.read_text().replace(fi072, moved_sha))
    rc, moved, err = fork(capsys, proj, sg, "--pin", "p23")
    assert rc == 1 and err.strip().endswith(f"drift on flashinfer {moved_sha[:12]}: branch {branch} not moved in any "
                                            "repository"), err
    assert (moved["status"], moved["packages"][0]["status"]) == ("held", "drift")
    assert (git(sg, "rev-parse", branch), git(fi, "rev-parse", branch)) == heads


def test_a_pin_naming_flashinfer_by_pypi_release_is_refused_before_anything_runs(capsys, project):
    proj, sg, fi = project
    text = (proj / "matrix.toml").read_text()
    start = text.index("[pins.p23.packages.flashinfer]")
    end = text.index("[arches.sm120]")
    (proj / "matrix.toml").write_text(text[:start] + '[pins.p23.packages.flashinfer]\npypi = "0.6.1"\n\n' + text[end:])
    rc, doc, err = fork(capsys, proj, sg, "--pin", "p23")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and doc is None and len(lines) == 1, err
    assert ("fork: the sm120 series patches flashinfer too (patch fi-jit-majors); its fork branch is made in a git "
            "checkout of flashinfer at the pin's revision of it, and pin 'p23' names it by its PyPI release 0.6.1") in lines[0]
    assert git(sg, "branch", "--list", "forgepatch/*") == "" and git(fi, "branch", "--list", "forgepatch/*") == ""
