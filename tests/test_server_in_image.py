"""The SGLang server tier in a REAL image: `forgepatch build` on the suite's local base image
plus a stand-in `sglang` launcher (tests/support/fake_sglang_server.py, a labelled TEST DOUBLE:
no GPU here, so no real SGLang server can start) installed in a derived base, then
`forgepatch smoke --runner docker` runs server profiles in it end to end: the driver inside
the image (forgepatch.inimage.server, put there by the builder) starts the launcher, the
monitor sees the phases, and the results carry the combination and the toolchain."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from pathlib import Path

import pytest

from support.smoke_matrix import FAKE, run_cli

pytestmark = pytest.mark.docker

STANDIN = "/opt/forgepatch-test-standin/fake_sglang_server.py"  # the stand-in launcher, in the derived base

MATRIX = """\
default_pin = "p23"

[pins.p23]
pypi = "0.5.23"

[pins.p20]
pypi = "0.5.20"

[arches.sm120]
patches = ["sm120-flashinfer-allreduce-fusion"]
base_image = "{base}"
profiles = ["tp2", "ep8"]

[profiles.tp2]
flags = ["--tp-size 2"]
gpus = 0
timeout_s = 120

[profiles.ep8]
flags = ["--tp-size 2", "--ep-size 8"]
gpus = 0
timeout_s = 120
required = false
env = {{ FAKE_SGLANG_FAIL_IF = "--ep-size 8", FAKE_SGLANG_FAIL = "cublas" }}

[smoke]
model = "/models/stand-in"
server_command = "python3 {standin}"
image_repo = "{repo}"
"""


@pytest.fixture(scope="module")
def standin_base(docker_client, base_image):
    """The local base image plus the stand-in launcher (labelled as a stand-in)."""
    tag = f"forgepatch-test/standin-base:{uuid.uuid4().hex[:8]}"
    dockerfile = (f"FROM {base_image}\nCOPY fake_sglang_server.py {STANDIN}\n"
                  'LABEL forgepatch-test.stand-in="sglang launcher: tests/support/fake_sglang_server.py, not SGLang"\n')
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(FAKE, "fake_sglang_server.py")
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile.encode()))
    buf.seek(0)
    image, _ = docker_client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True)
    yield tag
    docker_client.images.remove(image.id, force=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory, standin_base, docker_client):
    from forgepatch.paths import SHIPPED_PATCHES

    tmp = tmp_path_factory.mktemp("server-in-image")
    repo = f"forgepatch-test/server-{uuid.uuid4().hex[:8]}"
    config = tmp / "matrix.toml"
    config.write_text(MATRIX.format(base=standin_base, standin=STANDIN, repo=repo))
    args = ["--config", config, "--patches", SHIPPED_PATCHES]
    r = run_cli(*args, "build", "--arch", "sm120", "--context-dir", tmp / "ctx", "--json", timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    yield args, tmp, doc
    for image in docker_client.api.images(name=repo):
        docker_client.api.remove_image(image["Id"], force=True)


def test_server_profiles_run_in_the_built_image(built):
    args, tmp, build = built
    labels = build["labels"]
    r = run_cli(*args, "smoke", "--runner", "docker", "--arch", "sm120", "--pin", "p23", "--json", "--jobs", "2",
                "--logs", tmp / "logs", timeout=600)
    assert r.returncode == 0, r.stderr  # ep8 fails but is not required
    doc = json.loads(r.stdout)
    assert doc["schema"] == "forgepatch.smoke-results/2"
    jobs = {j["profile"]: j for j in doc["jobs"]}
    tp2, ep8 = jobs["tp2"], jobs["ep8"]
    assert tp2["status"] == "pass" and tp2["kind"] == "server", tp2
    assert tp2["last_phase"] == "answered"
    # the combination the job ran on, from the image the builder made
    for job in (tp2, ep8):
        assert job["image_id"] == build["image_id"]
        assert job["patchset"] == labels["forgepatch.patchset"] and job["patchset"]
        assert job["upstream"] == "pypi:0.5.23" and job["engine"] == labels["forgepatch.engine"]
        # the stack inside the image: Debian's python3, no torch (CPU-only base), no GPU
        tc = job["toolchain"]
        assert tc["python"].startswith("3.") and tc["torch"] is None and tc["gpus"] == []
        assert tc["sglang"] == "0.5.23"  # the patched release the builder installed
        # what the server process itself imported: the overlay's sglang (its import fails in this
        # base without SGLang's dependencies; the place and version are still read), no flashinfer
        sg = job["imported"]["sglang"]
        assert (sg["version"], sg["dir"]) == ("0.5.23", "/usr/local/lib/python3.11/dist-packages/sglang"), sg
        assert job["imported"]["flashinfer"] is None
    assert (ep8["status"], ep8["label"], ep8["failing_phase"]) == ("fail", "CUBLAS_STATUS_EXECUTION_FAILED", "graph capture")

    log = Path(tp2["log_path"]).read_text()
    # the driver inside the image launched the stand-in with the profile's flags (in the same
    # process as the report of what it imported) and Ready came from a capture end plus a real
    # chat completion
    assert (f"[forgepatch-server] launch python3 -m forgepatch.inimage.imported --run-path {STANDIN} -- "
            "--model-path /models/stand-in") in log
    assert log.index("[forgepatch-imported] {") < log.index("Capture cuda graph begin")
    assert "--tp-size 2" in log and "[forgepatch-toolchain] {" in log
    order = [log.index(s) for s in ("Capture cuda graph begin", "Capture cuda graph end",
                                   "[forgepatch-server] health 200", "[forgepatch-server] answered HTTP 200")]
    assert order == sorted(order), log[-3000:]
    assert "[forgepatch] exit code=0" in log


def test_an_image_of_another_pin_is_refused_before_any_job(built, docker_client):
    args, tmp, build = built
    r = run_cli(*args, "smoke", "--runner", "docker", "--arch", "sm120", "--pin", "p20", "--image", build["tags"][0],
                "--json", "--logs", tmp / "logs-p20")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "was built for sm120/p23, but job sm120-p20-tp2 is sm120/p20" in lines[0], r.stderr
    assert docker_client.containers.list(all=True, filters={"ancestor": build["image_id"]}) == []  # none started
