"""`forgepatch build` of a series that patches SGLang AND FlashInfer (issue 23, item 4): one
image over the test base carries both packages patched, each overlaid where the image's
python3 imports it from (found by importlib in the image, not a guessed path); the labels
and the build record name each package's version and patchset; a base whose installed
FlashInfer is another release than the pin's is refused (one line, both versions).

Real parts: the SGLang 0.5.23 and flashinfer-python 0.6.1 wheels from PyPI (cached), the
fixture series of tests/fixtures/packages (a shipped SGLang patch, a major-list, a text patch
on a .cu launcher, an added Triton config), the real CLI, a real Docker engine. The bases
with a FlashInfer installed are stand-ins: the test base plus a FlashInfer distribution's
metadata and package directory (a real FlashInfer base needs torch and CUDA, GBs).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
import zipfile
from pathlib import Path

import pytest

from forgepatch.errors import BadInput
from support.cli import WAIT_NOTICE, forgepatch

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "packages"
FI = "0.6.1"  # lists only [10] / [9, 10] and checks major 10 in the launcher: every FlashInfer patch applies
SITE = "/usr/local/lib/python3.11/dist-packages"  # Debian's purelib: where a package absent from the base goes
FI_HOME = "/opt/fi"  # the stand-in base's FlashInfer lives here (a .pth), not in site-packages
CU = "data/csrc/trtllm_fused_moe_kernel_launcher.cu"
CONFIG = ("srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0/"
          "E=128,N=768,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json")


def fi_wheel():
    from forgepatch.packages import KNOWN
    from forgepatch.sources import pypi_tree

    return pypi_tree(FI, KNOWN["flashinfer"])


def build_base(client, base_image: str, tag: str, version: str, files: dict[str, bytes]) -> str:
    """The test base plus a FlashInfer ``version`` installed under /opt/fi (dist-info and a
    package dir holding ``files``, found through a .pth): what importlib finds, not a guess."""
    script = (f"RUN mkdir -p {FI_HOME}/flashinfer_python-{version}.dist-info && "
              f"printf 'Metadata-Version: 2.1\\nName: flashinfer-python\\nVersion: {version}\\n' "
              f"> {FI_HOME}/flashinfer_python-{version}.dist-info/METADATA && echo {FI_HOME} > {SITE}/fi-home.pth\n")
    from images_support import build_from_files

    return build_from_files(client, tag, f"FROM {base_image}\nCOPY flashinfer/ {FI_HOME}/flashinfer/\n" + script,
                            {f"flashinfer/{k}": v for k, v in files.items()})


@pytest.fixture
def project(tmp_path, docker_client, base_image):
    """The fixture project, its pin taking FlashInfer 0.6.1, images under a repo of its own;
    every image made here is removed by ID afterwards."""
    dest = tmp_path / "proj"
    shutil.copytree(FIXTURE, dest)
    run = uuid.uuid4().hex[:8]
    repo = f"forgepatch-test/fi-{run}"
    text = (dest / "matrix.toml").read_text().replace('[pins."v0.5.23".packages.flashinfer]\npypi = "0.7.2"',
                                                      f'[pins."v0.5.23".packages.flashinfer]\npypi = "{FI}"')
    assert f'pypi = "{FI}"' in text
    (dest / "matrix.toml").write_text(text + f'\n[smoke]\nimage_repo = "{repo}"\n')
    made: list[str] = []
    yield dest, repo, made
    for image in docker_client.api.images(name=repo):
        made.append(image["Id"])
    for image_id in reversed(made):
        try:
            docker_client.api.remove_image(image_id, force=True)
        except Exception:  # already gone (a tag of one removed with the other)
            pass


def env():
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"))


def test_a_series_over_sglang_and_flashinfer_builds_one_image_with_both_patched(project, docker_client, base_image,
                                                                               tmp_path):
    proj, repo, made = project
    wheel = fi_wheel()
    with zipfile.ZipFile(wheel.origin) as zf:
        init = zf.read("flashinfer/__init__.py")
        comm = zf.read("flashinfer/jit/comm.py")
    # the base has FlashInfer 0.6.1 under /opt/fi, with a file of its own the image must keep
    stand_in = f"{repo}-base:fi"
    made.append(build_base(docker_client, base_image, stand_in, FI,
                           {"__init__.py": init, "jit/comm.py": comm, "base_only.txt": b"kept\n"}))
    record = tmp_path / "builds.json"
    r = forgepatch("build", "--arch", "sm120", "--base-image", stand_in, "--context-dir", tmp_path / "ctx",
                   "--record", record, "--json", cwd=proj, env=env())
    assert r.rc == 0, r.err
    doc = r.json()
    made.append(doc["image_id"])
    assert [(p["package"], p["source"], p["status"]) for p in doc["apply"]["packages"]] == [
        ("sglang", "pypi:0.5.23", "changed"), ("flashinfer", f"pypi:flashinfer-python=={FI}", "changed")]

    # labels name both packages: version, wheel sha256, the patchset of each one's part of the series
    from forgepatch.combination import LABEL, packages_of_labels

    labels = docker_client.api.inspect_image(doc["image_id"])["Config"]["Labels"]
    ids = packages_of_labels(labels)
    assert list(ids) == ["sglang", "flashinfer"]
    assert (ids["sglang"].upstream.version, ids["flashinfer"].upstream.version) == ("0.5.23", FI)
    assert ids["flashinfer"].upstream.revision == wheel.revision
    sg_set, fi_set = doc["apply"]["packages"][0]["patchset"], doc["apply"]["packages"][1]["patchset"]
    assert (ids["sglang"].patchset, ids["flashinfer"].patchset) == (sg_set, fi_set) and sg_set != fi_set
    assert labels[LABEL["patchset"]] not in (sg_set, fi_set)  # the whole series' hash covers both parts
    # ... and so does the build record
    rec = json.loads(record.read_text())["builds"][0]
    assert [(p["name"], p["version"], p["patchset"]) for p in rec["packages"]] == [
        ("sglang", "0.5.23", sg_set), ("flashinfer", FI, fi_set)]

    # identity (item 5): what the pin and the current series expect of flashinfer is what the image
    # carries; the pin moved to FlashInfer 0.7.2, release and smoke see another combination
    from forgepatch.combination import packages_problems
    from forgepatch.config import load_matrix
    from forgepatch.patching.library import PatchLibrary
    from forgepatch.patching.series import expected_packages, load_series

    library = PatchLibrary(proj / "patches")
    matrix = load_matrix(proj / "matrix.toml", library)
    want = expected_packages(matrix, load_series(matrix, "sm120", library), "v0.5.23")
    assert list(want) == ["flashinfer"] and packages_problems(labels, want) == []
    (proj / "matrix.toml").write_text((proj / "matrix.toml").read_text().replace(f'pypi = "{FI}"', 'pypi = "0.7.2"'))
    moved = load_matrix(proj / "matrix.toml", library)
    want_moved = expected_packages(moved, load_series(moved, "sm120", library), "v0.5.23")
    assert packages_problems(labels, want_moved) == [
        f"flashinfer: a different version (pypi {FI} {wheel.revision[:12]} vs pypi 0.7.2)"]
    from forgepatch.smoke.docker_runner import DockerRunner
    from forgepatch.smoke.jobs import JobSpec

    job = JobSpec("sm120-v0.5.23-ok", "sm120", "v0.5.23", "ok", "command", ["true"], image=doc["tags"][0],
                  packages=want_moved)
    with pytest.raises(BadInput, match=r"is not the combination of job sm120-v0.5.23-ok: flashinfer: a different "
                                       rf"version \(pypi {re.escape(FI)} "):
        DockerRunner(docker_client).preflight([job])
    from forgepatch.release.check import _judge_packages
    from forgepatch.release.evidence import inspect_image

    image = inspect_image(docker_client.api, doc["tags"][0])
    assert [r.code for r in _judge_packages(image, "v0.5.23", want_moved)] == ["image-packages"]
    assert _judge_packages(image, "v0.5.23", want) == []

    # in the image: python3 imports sglang from site-packages (the base has none) and flashinfer
    # from where the base has it, and both hold the patched files
    script = (
        "python3 -c 'import importlib.util as u; print(u.find_spec(\"sglang\").origin); "
        "print(u.find_spec(\"flashinfer\").origin)'; readlink -f /opt/forgepatch/packages/flashinfer; "
        f"grep -c 'supported_major_versions=\\[9, 10, 12\\]' {FI_HOME}/flashinfer/jit/comm.py; "
        f"grep -c 'TVM_FFI_ICHECK(major == 10 || major == 12)' {FI_HOME}/flashinfer/{CU}; "
        f"cat {FI_HOME}/flashinfer/base_only.txt; test -e {SITE}/flashinfer && echo SITE-COPY || echo NO-SITE-COPY; "
        f"test -f '{SITE}/sglang/{CONFIG}' && echo CONFIG; "
        f"sha256sum {FI_HOME}/flashinfer/jit/core.py | cut -c1-64; "
        # the base's own metadata of that release is kept: no second dist-info is put anywhere
        "python3 -c 'import importlib.metadata as m; print(m.version(\"flashinfer-python\"))'; "
        f"ls -d {FI_HOME}/*.dist-info {SITE}/*.dist-info 2>/dev/null; true"
    )
    out = docker_client.containers.run(doc["image_id"], ["sh", "-c", script], network_mode="none", remove=True,
                                       stderr=True).decode().splitlines()
    with zipfile.ZipFile(wheel.origin) as zf:
        import hashlib

        core = hashlib.sha256(zf.read("flashinfer/jit/core.py")).hexdigest()
    assert out == [f"{SITE}/sglang/__init__.py", f"{FI_HOME}/flashinfer/__init__.py", f"{FI_HOME}/flashinfer",
                   "1", "1", "kept", "NO-SITE-COPY", "CONFIG", core, FI,
                   f"{FI_HOME}/flashinfer_python-{FI}.dist-info"], out


def test_a_base_with_another_flashinfer_is_refused_naming_both_versions(project, docker_client, base_image, tmp_path):
    proj, repo, made = project
    stand_in = f"{repo}-base:fi072"
    made.append(build_base(docker_client, base_image, stand_in, "0.7.2", {"__init__.py": b""}))
    from forgepatch.images.base_facts import Wanted, read_base

    facts = read_base(docker_client.api, stand_in, made[-1],
                      packages=[Wanted("flashinfer", "flashinfer-python", "flashinfer", FI)])
    # found by importlib where the base has it (a .pth), not at a guessed site-packages path
    assert facts.packages["flashinfer"].version == "0.7.2" and facts.packages["flashinfer"].dir == f"{FI_HOME}/flashinfer"
    assert facts.packages["sglang"].version is None and facts.packages["sglang"].dir is None
    r = forgepatch("build", "--arch", "sm120", "--base-image", stand_in, "--context-dir", tmp_path / "ctx",
                   cwd=proj, env=env())
    lines = [ln for ln in r.err.splitlines() if ln.strip() and not ln.startswith(WAIT_NOTICE)]  # (shared cache)
    assert r.rc == 2 and len(lines) == 1 and "Traceback" not in r.err, r.err
    assert f"base image {stand_in} has flashinfer-python 0.7.2 installed, pin v0.5.23 is flashinfer-python {FI}" in lines[0]
    assert docker_client.api.images(name=repo) == []  # nothing was built


def test_a_base_without_flashinfer_gets_the_complete_package_and_metadata_of_the_pins_wheel(
        project, docker_client, base_image, tmp_path):
    """The test base has no FlashInfer: the image gets every file of the pin's wheel's
    flashinfer/ (its JIT compiles the CUDA sources and headers under data/ at run time), byte
    for byte, the patched ones patched, and the wheel's dist-info beside it, so
    `importlib.metadata.version("flashinfer-python")` is the pin's version there."""
    import hashlib

    proj, repo, made = project
    wheel = fi_wheel()
    with zipfile.ZipFile(wheel.origin) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist() if not i.is_dir()}
    package = {n[len("flashinfer/"):]: d for n, d in members.items() if n.startswith("flashinfer/")}
    others = {rel: hashlib.sha256(d).hexdigest() for rel, d in package.items() if not rel.endswith(".py")}
    assert any(rel.endswith((".cuh", ".h")) for rel in others) and CU in others  # what the JIT reads
    metadata = members[f"flashinfer_python-{FI}.dist-info/METADATA"]
    r = forgepatch("build", "--arch", "sm120", "--base-image", base_image, "--context-dir", tmp_path / "ctx", "--json",
                   cwd=proj, env=env())
    assert r.rc == 0, r.err
    image = r.json()["image_id"]
    made.append(image)
    script = (
        f"cd {SITE}/flashinfer && find . -type f ! -name '*.py' ! -path '*__pycache__*' | sort | xargs sha256sum; "
        "echo ===; find . -type f -name '*.py' | wc -l; "
        "python3 -c 'import importlib.metadata as m; print(m.version(\"flashinfer-python\"))'; "
        f"sha256sum {SITE}/flashinfer_python-{FI}.dist-info/METADATA | cut -c1-64; "
        f"grep -c 'TVM_FFI_ICHECK(major == 10 || major == 12)' {CU}; "
        "grep -c 'supported_major_versions=\\[9, 10, 12\\]' jit/comm.py"
    )
    out = docker_client.containers.run(image, ["sh", "-c", script], network_mode="none", remove=True,
                                       stderr=True).decode()
    listing, _, tail = out.partition("===\n")
    found = {}
    for line in listing.splitlines():
        sha, rel = line.split(None, 1)
        found[rel.removeprefix("./")] = sha
    assert set(found) == set(others), sorted(set(found) ^ set(others))[:5]
    patched = hashlib.sha256(package[CU]).hexdigest()
    assert found[CU] != patched  # the launcher carries the patch (below) ...
    assert {rel: sha for rel, sha in found.items() if rel != CU} == {rel: sha for rel, sha in others.items() if rel != CU}
    assert tail.split() == [str(sum(rel.endswith(".py") for rel in package)), FI, hashlib.sha256(metadata).hexdigest(),
                            "1", "1"], tail
