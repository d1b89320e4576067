"""The engine-hygiene check itself (tests/support/engine_hygiene.py) on the real engine: an
image made after the snapshot is reported (tags and size), and not once it is removed by ID.
Other processes may share the engine here, so only this test's own image is asserted on."""

from __future__ import annotations

import io
import tarfile
import uuid

import pytest

from support import engine_hygiene

pytestmark = pytest.mark.docker


def _build(client, base: str, tag: str) -> str:
    dockerfile = f"FROM {base}\nRUN echo {tag} > /hygiene\nLABEL forgepatch-test.hygiene={tag}\n".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    buf.seek(0)
    image, _ = client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True)
    return image.id


def test_a_new_image_is_a_leak_until_removed(docker_client, base_image):
    before = engine_hygiene.snapshot(docker_client)
    tag = f"forgepatch-test/hygiene:{uuid.uuid4().hex[:8]}"
    image_id = _build(docker_client, base_image, tag)
    try:
        found = [line for line in engine_hygiene.leaks(docker_client, before, keep={base_image}) if image_id[:19] in line]
        assert len(found) == 1 and tag in found[0] and "MB" in found[0], found
        # the base image, allowed to appear, is never reported
        assert not any(base_image in line for line in engine_hygiene.leaks(docker_client, before, keep={base_image}))
    finally:
        docker_client.images.remove(image_id, force=True)  # its step images go with it
    assert not any(image_id[:19] in line for line in engine_hygiene.leaks(docker_client, before))
    assert image_id not in engine_hygiene.snapshot(docker_client).images
