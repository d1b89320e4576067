"""`forgepatch release` promotes in a real registry and `verify` reads it back: the validated
digest gets `<pin>-<arch>-validated` and the release tag by a manifest PUT of the same manifest
(asserted from the registry: no upload session, no new blob), the digest goes into the annotated
tag and the ledger; the release runs on a host whose engine never had the image (the second
engine), from the registry alone. A tag moved in the registry makes verify exit 1 with both
digests. An unreachable registry is one-line bad input and nothing is tagged."""

from __future__ import annotations

import json
import uuid

import pytest

from forgepatch.infra.refs import parse
from support.cli import Run, assert_one_line_error
from support.release_world import ARCH, PIN, TAG, git

pytestmark = pytest.mark.docker
RELEASE_TAG = "forgepatch-p23-sm120"




def build_push_smoke(world, repo: str, tmp_path) -> tuple[str, str, object]:
    world.image_repo = repo
    world.write_matrix()
    record = tmp_path / "builds.json"
    built = world.on("build", "--arch", ARCH, "--pin", PIN, "--context-dir", world.root / "context", "--push",
                "--audit", "--record", record, "--json")
    assert built.rc == 0, built.err
    world.built.add(built.json()["image_id"])
    results = world.smoke("--builds", str(record))
    return built.json()["digest"], built.json()["image_id"], results


def test_release_promotes_by_manifest_and_verify_catches_a_moved_tag(world, registry, second_engine, tmp_path, docker_client):
    from forgepatch.infra import registry as remote

    repo = registry.repo(f"forgepatch-test/release-{uuid.uuid4().hex[:8]}")
    digest, image_id, results = build_push_smoke(world, repo, tmp_path)
    manifest = digest.partition("@")[2]
    blobs, uploads = registry.blobs(), registry.upload_sessions()

    reg = remote.Registry(parse(repo))
    dry = world.on("release", "--repo", world.repo, "--results", results, "--arch", ARCH, "--pin", PIN, "--dry-run",
              host=second_engine.host)
    assert dry.rc == 0, dry.err
    assert f"registry: would tag {digest} as {PIN}-{ARCH}-validated, {RELEASE_TAG}" in dry.out
    assert reg.head(parse(f"{repo}:{RELEASE_TAG}")) is None and world.tags() == []  # a dry run tags nothing

    # the release job runs where the image never was: everything comes from results + registry
    r = world.on("release", "--repo", world.repo, "--results", results, "--arch", ARCH, "--pin", PIN, "--json",
            host=second_engine.host)
    assert r.rc == 0, r.err
    (comb,) = json.loads(r.out)["combinations"]
    assert comb["status"] == "released"
    assert comb["registry"] == {"digest": digest, "tags": [f"{repo}:{PIN}-{ARCH}-validated", f"{repo}:{RELEASE_TAG}"]}
    assert reg.head(parse(f"{repo}:{PIN}-{ARCH}-validated")) == manifest
    assert reg.head(parse(f"{repo}:{RELEASE_TAG}")) == manifest
    assert registry.blobs() == blobs and registry.upload_sessions() == uploads  # no layer, no config uploaded
    assert second_engine.client().images.list() == []  # and nothing pulled to release it

    message = git(world.repo, "tag", "-l", "--format=%(contents)", TAG)
    assert f"Forgepatch-Image-Digest: {digest}" in message
    assert "kernel audit: pass for sm120" in message
    entry = json.loads(world.ledger.read_text())["releases"][-1]
    assert entry["image"]["digest"] == digest and entry["image"]["id"] == image_id
    assert entry["image"]["registry_tags"] == comb["registry"]["tags"]
    assert entry["audit"]["verdict"] == "pass"

    for host in (None, second_engine.host):  # with the image (engine + registry) and without (registry)
        v = world.on("verify", TAG, "--repo", world.repo, "--json", host=host)
        assert v.rc == 0, v.err
        assert any(c["check"] == "registry" for c in v.json()["checks"])

    # someone points the release tag at another image in the registry
    other = f"{repo}:moved"
    docker_client.api.tag(world.base, f"{repo}", "moved")
    try:
        for _ in docker_client.api.push(repo, tag="moved", stream=True, decode=True):
            pass
    finally:
        docker_client.api.remove_image(other, noprune=True)
    moved = remote.tag_remote(parse(other), [RELEASE_TAG])
    assert moved == {RELEASE_TAG: manifest}
    now = reg.head(parse(other))
    for host in (None, second_engine.host):
        v = world.on("verify", TAG, "--repo", world.repo, host=host)
        assert_one_line_error(v, 1, f"registry tag {repo}:{RELEASE_TAG} moved", f"it names {now}", f"recorded {manifest}")


def test_unreachable_registry_at_release_is_bad_input_and_nothing_is_tagged(world, tmp_path):
    from support.local_registry import start_registry

    private = start_registry(tmp_path / "registry")
    try:
        digest, _, results = build_push_smoke(world, private.repo(f"forgepatch-test/gone-{uuid.uuid4().hex[:8]}"), tmp_path)
    finally:
        private.stop()
    r = world.release(results)
    assert_one_line_error(Run(r.returncode, r.stdout, r.stderr), 2, f"cannot reach registry {private.host}")
    assert world.tags() == [] and world.ledger_bytes() is None
    assert world.image_id(world.validated) is None
