"""`forgepatch build` reads the base image's Python, platform and installed SGLang, and refuses a
base whose SGLang is another release than the pin's (one line, both versions) instead of
mixing two releases' files. The base with another SGLang is a stand-in: the test base image
plus a fake `sglang-0.5.20.dist-info` (a real SGLang base is GBs and needs a registry)."""

from __future__ import annotations

import io
import os
import tarfile
import uuid
from pathlib import Path

import pytest

from support.cli import assert_one_line_error, forgepatch

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[1]
MATRIX = """\
default_pin = "p23"

[pins.p23]
pypi = "0.5.23"

[arches.sm120]
patches = ["sm120-flashinfer-allreduce-fusion"]
base_image = "{base}"
profiles = ["ok"]

[profiles.ok]
kind = "command"
command = "true"
gpus = 0

[smoke]
image_repo = "forgepatch-test/base-check-{run}"
"""


@pytest.fixture
def stand_in(docker_client, base_image):
    """The test base with a fake dist-info of SGLang 0.5.20 where python3 finds it."""
    tag = f"forgepatch-test/sglang-0.5.20-stand-in:{uuid.uuid4().hex[:8]}"
    dockerfile = (f"FROM {base_image}\n"
                  "RUN d=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])') && "
                  "mkdir -p \"$d/sglang-0.5.20.dist-info\" && "
                  "printf 'Metadata-Version: 2.1\\nName: sglang\\nVersion: 0.5.20\\n' > \"$d/sglang-0.5.20.dist-info/METADATA\"\n")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile.encode())
        tar.addfile(info, io.BytesIO(dockerfile.encode()))
    buf.seek(0)
    image, _ = docker_client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True,
                                          network_mode="none")
    yield tag
    docker_client.images.remove(image.id, force=True)


def test_build_refuses_a_base_with_another_sglang(stand_in, base_image, tmp_path):
    from forgepatch.infra.dockerapi import api
    from forgepatch.images.base_facts import read_base

    client = api()
    facts = read_base(client, stand_in, client.inspect_image(stand_in)["Id"])
    assert facts.sglang == "0.5.20" and facts.python.startswith("3.") and facts.machine
    plain = read_base(client, base_image, client.inspect_image(base_image)["Id"])
    assert plain.sglang is None and plain.python == facts.python

    (tmp_path / "matrix.toml").write_text(MATRIX.format(base=stand_in, run=uuid.uuid4().hex[:8]))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = forgepatch("build", "--arch", "sm120", "--pin", "p23", "--context-dir", tmp_path / "ctx", cwd=tmp_path, env=env)
    assert_one_line_error(r, 2, f"base image {stand_in} has SGLang 0.5.20 installed", "pin p23 is SGLang 0.5.23")
    assert client.images(name="forgepatch-test/base-check-*") == []  # nothing was built
