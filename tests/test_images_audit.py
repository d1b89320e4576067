"""`forgepatch audit --image` on a real image built by the suite: the sm120 image (local base,
patched SGLang 0.5.23 overlay) with the CUDA fixtures installed into site-packages from a real
wheel through the build's extra-wheels step. Nothing runs in the image during the audit."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
import zipfile
from pathlib import Path

import pytest

from forgepatch.arch import get_arch
from forgepatch.combination import Upstream
from forgepatch.images.build import build_image
from forgepatch.images.prepare import build_context
from forgepatch.images.spec import ImageSpec, SourceFacts
from images_support import release_tree
from support.cli import assert_one_line_error, forgepatch

pytestmark = pytest.mark.docker

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "cuda"
INSTALLED = ["libfp_sm90a.so", "libfp_sm100f_ptx.so", "libfp_sm120.so", "libfp_zstd.so", "libfp_nocompress.so"]
SITE = "/usr/local/lib/python3.11/dist-packages"  # where pip puts a wheel on the Debian base


def kernel_wheel(directory: Path) -> Path:
    """A real platform wheel (PEP 427, correct RECORD) carrying the fixture libraries."""
    name, version = "fp_kernels", "1.0"
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": b""}
    files.update({f"{name}/{lib}": (FIXTURES / lib).read_bytes() for lib in INSTALLED})
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    files[f"{dist}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: forgepatch-tests\nRoot-Is-Purelib: false\n"
                              b"Tag: py3-none-linux_x86_64\n")
    record = [f"{arc},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
              for arc, data in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, data in files.items():
            zf.writestr(zipfile.ZipInfo(arc, (2000, 1, 1, 0, 0, 0)), data)
    return path


@pytest.fixture(scope="module")
def sm120_image(docker_client, base_image, tmp_path_factory):
    root = tmp_path_factory.mktemp("audit-image")
    pin = f"a{uuid.uuid4().hex[:8]}"
    repo = f"forgepatch-test/audit-{pin}"
    tree = release_tree()
    ctx = build_context(root / "ctx", tree, tree, [kernel_wheel(root / "wheels")])
    spec = ImageSpec(get_arch("sm120"), pin, repo, base_image, ctx, SourceFacts(Upstream("pypi", "0.5.23", "a" * 64)),
                     patchset="audit-test")
    result = build_image(spec, api=docker_client.api, log_path=root / "build.log")
    yield result.tags[0]
    for image in docker_client.api.images(name=repo):
        docker_client.api.remove_image(image["Id"], force=True)


def test_sm120_image_flags_the_sm90a_only_library(docker_client, sm120_image):
    mine = {"ancestor": sm120_image}  # containers of this image only: the engine may be shared
    before = {c["Id"] for c in docker_client.api.containers(all=True, filters=mine)}
    run = forgepatch("audit", "--arch", "sm120", "--image", sm120_image, "--json")
    assert run.rc == 1, run.err
    doc = run.json()
    assert doc["source"]["kind"] == "image" and f"{SITE}" in doc["source"]["roots"]
    got = {lib["path"]: lib["status"] for lib in doc["libraries"]}
    assert got == {
        f"{SITE}/fp_kernels/libfp_sm90a.so": "none",
        f"{SITE}/fp_kernels/libfp_sm100f_ptx.so": "ptx-jit",
        f"{SITE}/fp_kernels/libfp_sm120.so": "sass",
        f"{SITE}/fp_kernels/libfp_zstd.so": "sass",
        f"{SITE}/fp_kernels/libfp_nocompress.so": "sass",
    }
    assert doc["failing"] == [f"{SITE}/fp_kernels/libfp_sm90a.so"]
    assert "libfp_sm90a.so" in run.err
    # the same libraries read in place give the same verdicts (image path = dir path)
    local = json.loads(forgepatch("audit", "--arch", "sm120", "--dir", str(FIXTURES), "--json").out)
    for lib in local["libraries"]:
        if lib["path"] in INSTALLED:
            theirs = next(x for x in doc["libraries"] if x["path"].endswith("/" + lib["path"]))
            assert {k: theirs[k] for k in ("status", "sass", "ptx", "entries")} == \
                   {k: lib[k] for k in ("status", "sass", "ptx", "entries")}
    # the audit's temporary container is gone, and nothing was started
    assert {c["Id"] for c in docker_client.api.containers(all=True, filters=mine)} == before
    assert not docker_client.api.containers(all=True, filters={"label": "forgepatch.audit"})


def test_sm120_image_passes_for_an_arch_all_of_them_support_is_not_claimed(sm120_image):
    """sm100: the sm_100f + PTX library runs, the sm120-only and sm90a-only ones do not."""
    run = forgepatch("audit", "--arch", "sm100", "--image", sm120_image, "--markdown")
    assert run.rc == 1
    assert "| `/usr/local/lib/python3.11/dist-packages/fp_kernels/libfp_sm100f_ptx.so` | sass |" in run.out
    for lib in ("libfp_sm90a.so", "libfp_sm120.so", "libfp_zstd.so"):
        assert f"fp_kernels/{lib}` | **none** |" in run.out


def test_base_image_without_cuda_passes(base_image):
    run = forgepatch("audit", "--arch", "sm120", "--image", base_image, "--json")
    assert run.rc == 0, run.err
    doc = run.json()
    assert doc["libraries"] == [] and doc["stats"]["cuda_libraries"] == 0
    roots = doc["source"]["roots"]  # /lib -> /usr/lib on Debian: read once, by its real path
    assert "/usr/lib/python3/dist-packages" in roots and not any(r.startswith("/lib/") for r in roots)


def test_missing_image_is_bad_input(docker_client):
    assert_one_line_error(forgepatch("audit", "--arch", "sm120", "--image", "forgepatch-test/no-such-image:0"),
                          2, "--image", "not in the local Docker engine")


def test_kernels_in_a_directory_a_pth_adds_are_audited(docker_client, base_image):
    """python3 imports from the directories the site dir's .pth files add too (an sm90a-only
    library there is loaded like one in site-packages): the kernel audit reads them, as the
    JIT audit reads FlashInfer there (one reading of the .pth files, image_files.ImportPaths).
    A directory inside another one read is read once; a .pth below the site dir's top is not
    site's, so its directory is not read."""
    from images_support import build_from_files

    kern, never = "/opt/kern", "/opt/never"
    files = {
        f"root{kern}/fp_kernels/libfp_sm90a.so": (FIXTURES / "libfp_sm90a.so").read_bytes(),
        f"root{kern}/fp_kernels/libfp_sm120.so": (FIXTURES / "libfp_sm120.so").read_bytes(),
        f"root{never}/libfp_sm90a.so": (FIXTURES / "libfp_sm90a.so").read_bytes(),
        f"root{SITE}/kern.pth": f"# kernels live outside site-packages\n{kern}\n{kern}/fp_kernels\n".encode(),
        f"root{SITE}/sub/nested.pth": f"{never}\n".encode(),
    }
    tag = f"forgepatch-test/audit-pth-{uuid.uuid4().hex[:8]}:1"
    image = build_from_files(docker_client, tag, f"FROM {base_image}\nCOPY root/ /\n", files)
    try:
        run = forgepatch("audit", "--arch", "sm120", "--image", tag, "--json")
        assert run.rc == 1, (run.out, run.err)
        doc = run.json()
        assert doc["source"]["pth_dirs"] == [kern, f"{kern}/fp_kernels"]
        assert {lib["path"]: lib["status"] for lib in doc["libraries"]} == {
            f"{kern}/fp_kernels/libfp_sm90a.so": "none", f"{kern}/fp_kernels/libfp_sm120.so": "sass"}
        assert doc["failing"] == [f"{kern}/fp_kernels/libfp_sm90a.so"]
        assert f"{kern}/fp_kernels/libfp_sm90a.so" in run.err
        assert doc["jit"]["status"] == "absent"
    finally:
        docker_client.api.remove_image(image, force=True)
