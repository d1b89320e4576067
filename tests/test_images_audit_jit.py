"""`forgepatch audit --image` reads FlashInfer's JIT arch lists in the image (issue 23), besides
its cubins: where python3 would import flashinfer from (a site-packages, or a directory a .pth
adds), every `supported_major_versions=[...]` list judged for the arch by `gates.jitlists`; a
list that rejects the arch is a finding with its path:line in the image (a warning; `--strict`
fails it), one that cannot be evaluated is `unverified` (exit 1), an image without flashinfer
says so. Nothing runs in the image.

Real parts: the flashinfer-python 0.6.1 and 0.7.2 wheels from PyPI (cached), the fixture series
of tests/fixtures/packages applied by the real CLI (`apply --out`), a real Docker engine and the
test base. The FlashInfer installs are stand-ins: the test base plus a distribution's metadata
and its package's `.py` files (0.7.2: those holding a list, of its 3375), as
tests/test_images_packages.py makes them (a real FlashInfer base needs torch and CUDA, GBs).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from forgepatch.arch import get_arch
from forgepatch.images.audit import audit_image
from support.cli import assert_one_line_error, forgepatch

pytestmark = pytest.mark.docker
FIXTURE = Path(__file__).parent / "fixtures" / "packages"
SITE = "/usr/local/lib/python3.11/dist-packages"
FI_HOME = "/opt/fi"  # a directory a .pth adds, outside every site-packages
COMM, MOE = "jit/comm.py:61", "jit/fused_moe.py:235"  # the two builders the fixture series widens (0.6.1)


def fi_tree(version: str) -> Path:
    from forgepatch.sources import resolve_source

    return Path(resolve_source(f"pypi:flashinfer-python=={version}").package)


def py_files(package: Path, only_lists: bool = False) -> dict[str, bytes]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        data = path.read_bytes()
        if not only_lists or b"supported_major_versions" in data or path.name == "__init__.py" and path.parent == package:
            out[path.relative_to(package).as_posix()] = data
    return out


def dist_info(version: str) -> dict[str, bytes]:
    return {f"flashinfer_python-{version}.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n".encode()}


def make_image(client, base_image: str, tag: str, files: dict[str, bytes]) -> str:
    """The test base plus ``files`` (absolute path in the image -> bytes)."""
    from images_support import build_from_files

    return build_from_files(client, tag, f"FROM {base_image}\nCOPY root/ /\n",
                            {"root" + path: data for path, data in files.items()})


def under(prefix: str, files: dict[str, bytes]) -> dict[str, bytes]:
    return {f"{prefix}/{rel}": data for rel, data in files.items()}


@pytest.fixture(scope="module")
def images(docker_client, base_image, tmp_path_factory):
    """Stand-in images, made once: name -> tag; removed by ID afterwards."""
    repo = f"forgepatch-test/auditjit-{uuid.uuid4().hex[:8]}"
    old = py_files(fi_tree("0.6.1"))
    # the fixture series applied to 0.6.1 by the CLI: the tree `build` would overlay
    proj = tmp_path_factory.mktemp("jit") / "proj"
    shutil.copytree(FIXTURE, proj)
    out = proj.parent / "out"
    applied = forgepatch("apply", "--arch", "sm120", "--source", "pypi:flashinfer-python==0.6.1", "--out", out, cwd=proj)
    assert applied.rc == 0, applied.err
    patched = py_files(out / "flashinfer-python" / "flashinfer")
    assert patched != old
    bad = b"from .core import majors\n\ndef gen_x_module():\n    return gen_jit_spec(\n        supported_major_versions=majors(),\n    )\n"
    specs = {
        # 0.6.1 unpatched, found through a .pth (not in any site-packages)
        "unpatched": {**under(f"{FI_HOME}/flashinfer", old), **under(FI_HOME, dist_info("0.6.1")),
                      f"{SITE}/fi-home.pth": f"# FlashInfer lives elsewhere\n{FI_HOME}\n".encode()},
        # 0.6.1 with the fixture series applied, in site-packages
        "patched": {**under(f"{SITE}/flashinfer", patched), **under(SITE, dist_info("0.6.1"))},
        "v072": {**under(f"{SITE}/flashinfer", py_files(fi_tree("0.7.2"), only_lists=True)), **under(SITE, dist_info("0.7.2"))},
        # a list that is no literal: unverified at its line
        "unreadable": {f"{SITE}/flashinfer/__init__.py": b"", f"{SITE}/flashinfer/jit/extra.py": bad,
                       **under(SITE, dist_info("0.6.1"))},
        # installed twice: which one python3 imports is not read statically
        "twice": {f"{SITE}/flashinfer/__init__.py": b"", f"{FI_HOME}/flashinfer/__init__.py": b"",
                  f"{SITE}/fi-home.pth": f"{FI_HOME}\n".encode()},
    }
    tags = {}
    made = []
    for name, files in specs.items():
        tags[name] = f"{repo}:{name}"
        made.append(make_image(docker_client, base_image, tags[name], files))
    tags["none"] = base_image
    yield tags
    for image_id in made:
        docker_client.api.remove_image(image_id, force=True)


def jit_of(docker_client, tag: str, arch: str = "sm120", strict: bool = False):
    report = audit_image(tag, get_arch(arch), strict, api=docker_client.api)
    return report, report.jit


def test_unpatched_flashinfer_through_a_pth_rejects_sm120_at_its_lists(docker_client, images):
    report, jit = jit_of(docker_client, images["unpatched"])
    assert (jit.status, jit.dir, jit.version, len(jit.lists)) == ("rejects", f"{FI_HOME}/flashinfer", "0.6.1", 19)
    rejecting = {f.where.removeprefix(f"{FI_HOME}/flashinfer/"): f.code for f in jit.rejecting}
    assert len(rejecting) == 5 and rejecting[COMM] == "[9, 10]" and rejecting[MOE] == "[10]"
    assert jit.unverified == [] and report.ok  # a finding, not a failure, unless --strict
    # sm100 is listed in both builders
    sm100 = {f.where.removeprefix(f"{FI_HOME}/flashinfer/"): f.verdict for f in jit_of(docker_client, images["unpatched"], "sm100")[1].lists}
    assert sm100[COMM] == sm100[MOE] == "admits"
    # the CLI: exit 0 with the findings named by path:line; --strict fails naming the JIT lists
    run = forgepatch("audit", "--arch", "sm120", "--image", images["unpatched"], "--json")
    assert run.rc == 0, run.err
    doc = run.json()["jit"]
    assert doc["status"] == "rejects" and doc["counts"] == {"admits": 14, "rejects": 5, "unverified": 0}
    assert {"path": f"{FI_HOME}/flashinfer/jit/comm.py", "line": 61, "function": "gen_trtllm_comm_module",
            "majors": [9, 10], "code": "[9, 10]", "verdict": "rejects"} in doc["lists"]
    strict = forgepatch("audit", "--arch", "sm120", "--image", images["unpatched"], "--strict")
    assert strict.rc == 1
    assert f"flashinfer JIT lists: 5 of 19 supported_major_versions lists of flashinfer 0.6.1 at {FI_HOME}/flashinfer" \
        in strict.err


def test_the_series_admits_sm120_in_the_builders_it_widens(docker_client, images):
    _, before = jit_of(docker_client, images["unpatched"])
    _, jit = jit_of(docker_client, images["patched"])
    assert (jit.dir, jit.version, len(jit.lists)) == (f"{SITE}/flashinfer", "0.6.1", 19)
    verdicts = {f.where.removeprefix(f"{SITE}/flashinfer/"): f.verdict for f in jit.lists}
    assert verdicts[COMM] == verdicts[MOE] == "admits"
    # the three sm100/sm103-only builders the series leaves alone still reject: named, a warning
    assert sorted(f.where.removeprefix(f"{SITE}/flashinfer/") for f in jit.rejecting) == sorted(
        f.where.removeprefix(f"{FI_HOME}/flashinfer/") for f in before.rejecting if not f.where.endswith((COMM, MOE)))
    assert jit.status == "rejects" and len(jit.rejecting) == 3
    # 0.7.2 lists 12 in both builders upstream; module constants are read through: nothing unverified
    _, v072 = jit_of(docker_client, images["v072"])
    assert (v072.version, len(v072.lists), len(v072.rejecting), v072.unverified) == ("0.7.2", 59, 22, [])
    assert all(f.verdict == "admits" for f in v072.lists if f.function in ("gen_trtllm_comm_module",
                                                                          "gen_trtllm_gen_fused_moe_sm100_module"))


def test_a_list_that_cannot_be_evaluated_is_unverified_and_fails(docker_client, images):
    report, jit = jit_of(docker_client, images["unreadable"])
    assert jit.status == "unverified" and not report.ok
    assert [(f.where, f.code) for f in jit.unverified] == [(f"{SITE}/flashinfer/jit/extra.py:5", "majors()")]
    run = forgepatch("audit", "--arch", "sm120", "--image", images["unreadable"])
    assert_one_line_error(run, 1, f"{SITE}/flashinfer/jit/extra.py:5 gen_x_module majors()")
    # the build record's summary carries it, typed, and says why
    from forgepatch.combination.records import AuditSummary

    summary = AuditSummary.of(report)
    assert summary.verdict == "fail" and summary.jit.unverified == [f"{SITE}/flashinfer/jit/extra.py:5"]
    assert "flashinfer 0.6.1 JIT lists unverified (1 of 1: " in summary.line()


def test_flashinfer_twice_is_unverified_and_an_image_without_it_says_so(docker_client, images):
    report, jit = jit_of(docker_client, images["twice"])
    assert jit.status == "unverified" and not report.ok
    assert f"installed in 2 places ({FI_HOME}/flashinfer, {SITE}/flashinfer)" in jit.reason \
        or f"installed in 2 places ({SITE}/flashinfer, {FI_HOME}/flashinfer)" in jit.reason
    report, jit = jit_of(docker_client, images["none"])
    assert (jit.status, jit.lists, jit.reason) == ("absent", [], "no flashinfer package found: no JIT list was checked")
    assert report.ok
