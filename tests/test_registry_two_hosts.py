"""Two hosts, honestly simulated: `forgepatch build --push --record` on the main Docker engine
(the build host), `forgepatch smoke --builds RECORD` on a second engine with its own image
store (tests/support/second_engine.sh, a stand-in GPU host that has never seen the image): the
image arrives only through the registry. The smoke job is a stand-in (profile `stand-in`: a
command that reads the patched package in the image, no GPU), named as such.

Also on the second engine, each refused before anything is pulled: labels that do not match
the job (arch/pin, patchset), a digest the registry does not have, a tag where a digest is
required."""

from __future__ import annotations

import json
import uuid

import pytest

from forgepatch.combination.records import BuildRecord
from support.cli import Run, assert_one_line_error
from support.release_world import ARCH, PIN

pytestmark = pytest.mark.docker

STAND_IN = """
[profiles.stand-in]
kind = "command"
command = "python3 -c 'import os; print(os.path.realpath(\\"/opt/forgepatch/sglang\\"))'"
gpus = 0
timeout_s = 60
"""




def smoke(world, engine, *args) -> Run:
    return world.on("smoke", "--runner", "docker", "--arch", ARCH, "--pin", PIN, "--profile", "stand-in",
               "--logs", world.root / "logs", "--json", *args, host=engine.host)


def test_build_host_pushes_gpu_host_pulls_by_digest(world, registry, second_engine, tmp_path):
    world.image_repo = registry.repo(f"forgepatch-test/two-hosts-{uuid.uuid4().hex[:8]}")
    world.write_matrix()
    text = world.config.read_text().replace('profiles = ["ok", "gate", "extra"]', 'profiles = ["ok", "gate", "extra", "stand-in"]')
    world.config.write_text(text + STAND_IN)
    gpu_host = second_engine.client()
    assert gpu_host.images.list() == []  # a separate image store that has never seen anything

    record = tmp_path / "builds.json"
    built = world.on("build", "--arch", ARCH, "--pin", PIN, "--context-dir", world.root / "context", "--push",
                "--audit", "--record", record, "--json")
    assert built.rc == 0, built.err
    doc = built.json()
    world.built.add(doc["image_id"])
    digest = doc["digest"]
    registry_ref = digest.partition("@")[0]

    # the patch files change on the GPU host: the image's patchset no longer matches
    patch_file = next(world.patches.glob("sm120-flashinfer-allreduce-fusion.toml"))
    original = patch_file.read_text()
    patch_file.write_text(original + "\n# changed on the GPU host\n")
    try:
        r = smoke(world, second_engine, "--builds", record)
        assert_one_line_error(r, 2, f"image {digest!r} was built with patchset", "now hash to")
    finally:
        patch_file.write_text(original)
    assert gpu_host.images.list() == []  # nothing pulled for a refused job

    missing = f"{registry_ref}@sha256:{'0' * 64}"
    r = smoke(world, second_engine, "--image", missing)
    assert_one_line_error(r, 2, "has no such digest")
    r = smoke(world, second_engine, "--image", doc["tag"])
    assert_one_line_error(r, 2, "is a tag, not a digest")
    assert gpu_host.images.list() == []

    # the stand-in job on the GPU host: pulled by digest, run, the digest in the results
    r = smoke(world, second_engine, "--builds", record)
    assert r.rc == 0, r.err
    (job,) = json.loads(r.out)["jobs"]
    assert job["profile"] == "stand-in" and job["status"] == "pass"
    assert job["image_digest"] == digest and job["image_id"] == doc["image_id"]
    assert job["patchset"] == world.patchset
    assert job["audit"]["verdict"] == "pass" and job["audit"]["arch"] == ARCH
    pulled = gpu_host.images.get(digest)
    assert pulled.id == doc["image_id"]  # the same image, byte for byte (its config digest)
    assert digest in pulled.attrs["RepoDigests"]
    gpu_host.images.remove(pulled.id, force=True)


def test_label_mismatch_refused_from_the_registry(world, registry, second_engine, tmp_path):
    """A digest whose labels name another arch/pin than the job is refused from the registry's
    config, before any pull."""
    world.image_repo = registry.repo(f"forgepatch-test/mismatch-{uuid.uuid4().hex[:8]}")
    world.write_matrix()
    text = world.config.read_text().replace('[arches.sm90]\npatches = []', '[arches.sm90]\npatches = []\npins = ["p23"]')
    world.config.write_text(text)
    built = world.on("build", "--arch", ARCH, "--pin", PIN, "--context-dir", world.root / "context", "--push", "--json")
    assert built.rc == 0, built.err
    world.built.add(built.json()["image_id"])
    digest = built.json()["digest"]
    r = world.on("smoke", "--runner", "docker", "--arch", "sm90", "--pin", PIN, "--profile", "ok", "--image", digest,
            "--logs", world.root / "logs", "--json", host=second_engine.host)
    assert_one_line_error(r, 2, f"image {digest!r} was built for {ARCH}/{PIN}, but job", "sm90")
    assert second_engine.client().images.list() == []


def test_a_fresh_build_host_takes_the_content_from_the_registry(world, registry, second_engine, docker_client, tmp_path):
    """`build --push` on a host that never built this content (a fresh CI runner: the second
    engine, given only the base image) finds the content tag in the registry with the same
    content hash on the same base: nothing is built or uploaded, the registry's digest is
    reported and recorded; with --audit the image is pulled by digest and audited."""
    world.image_repo = registry.repo(f"forgepatch-test/fresh-{uuid.uuid4().hex[:8]}")
    world.write_matrix()
    first = world.on("build", "--arch", ARCH, "--pin", PIN, "--context-dir", world.root / "context", "--push", "--json")
    assert first.rc == 0, first.err
    doc = first.json()
    world.built.add(doc["image_id"])

    # the second engine gets the same base image (same ID, same name), through the registry
    base_repo = registry.repo(f"forgepatch-test/base-{uuid.uuid4().hex[:8]}")
    docker_client.api.tag(world.base, base_repo, "bookworm")
    try:
        for chunk in docker_client.api.push(base_repo, tag="bookworm", stream=True, decode=True):
            assert "error" not in chunk, chunk
    finally:
        docker_client.api.remove_image(f"{base_repo}:bookworm", noprune=True)  # the tag only
    fresh = second_engine.client()
    base = fresh.images.pull(base_repo, tag="bookworm")
    base.tag(*world.base.rsplit(":", 1))
    assert base.id == docker_client.images.get(world.base).id
    uploads = registry.upload_sessions()

    record = tmp_path / "builds.json"
    r = world.on("build", "--arch", ARCH, "--pin", PIN, "--context-dir", world.root / "ctx2", "--push", "--record",
            record, "--json", host=second_engine.host)
    assert r.rc == 0, r.err
    hit = r.json()
    assert hit["registry_hit"] is True and hit["uploaded"] is False and hit["cache_hit"] is True
    assert hit["digest"] == doc["digest"] and hit["image_id"] == doc["image_id"]
    assert [i.id for i in fresh.images.list()] == [base.id]  # nothing was built there
    assert registry.upload_sessions() == uploads
    assert BuildRecord.load(record).find(ARCH, PIN).digest == doc["digest"]

    audited = world.on("build", "--arch", ARCH, "--pin", PIN, "--context-dir", world.root / "ctx2", "--push", "--audit",
                  "--json", host=second_engine.host)
    assert audited.rc == 0, audited.err
    assert audited.json()["registry_hit"] is True and audited.json()["audit"]["verdict"] == "pass"
    assert fresh.images.get(doc["tags"][0]).id == doc["image_id"]  # pulled by digest and tagged for the audit
    for image in fresh.images.list():
        fresh.images.remove(image.id, force=True)
