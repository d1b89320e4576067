"""bake -> builder -> smoke: `smoke --builds docker-bake.json` runs the images a bake pushed.

The builder here is a stand-in for `docker buildx bake --push` (buildx is not installable on this
machine: Debian bookworm ships no docker-buildx package and nothing outside the package
registries is reachable): `bake_with_engine` builds each target with the real Docker engine's
builder from the fields buildx reads (context, dockerfile, args, labels, tags, network) and
pushes its tags to the real local registry. Everything after it is the real thing: the bake
file forgepatch wrote, the registry's manifests and configs, `forgepatch smoke` running jobs in
the pushed image.
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest

from forgepatch.infra.refs import parse, split_tag
from support.cli import assert_one_line_error
from support.release_world import ARCH, PIN

pytestmark = pytest.mark.docker


def bake_with_engine(client, bake_file: Path, push: bool = True) -> dict[str, str]:
    """Stand-in for `docker buildx bake -f FILE --push`: every target built by the engine's
    builder from its bake fields, tagged with its tags and (``push``) pushed. Target name ->
    image ID."""
    doc = json.loads(bake_file.read_text())
    built = {}
    for name, target in doc["target"].items():
        context = (bake_file.parent / target["context"]).resolve()
        stream = client.api.build(path=str(context), dockerfile=target["dockerfile"], buildargs=target["args"],
                                  labels=target["labels"], network_mode=target["network"], rm=True, decode=True)
        image_id = None
        for event in stream:
            assert "error" not in event, event
            image_id = (event.get("aux") or {}).get("ID", image_id)
        assert image_id, f"no image for target {name}"
        for ref in target["tags"]:
            repo, tag = split_tag(ref)
            client.api.tag(image_id, repo, tag, force=True)
            if push:
                for event in client.api.push(repo, tag=tag, stream=True, decode=True):
                    assert "error" not in event, event
        built[name] = image_id
    return built


def test_smoke_runs_the_images_a_pushed_bake_names(world, registry, docker_client, tmp_path):
    from forgepatch.infra import registry as remote

    world.image_repo = registry.repo(f"forgepatch-test/bake-{uuid.uuid4().hex[:8]}")
    world.write_matrix()
    bake_file = tmp_path / "docker-bake.json"
    r = world.on("bake", "--out", bake_file, "--arch", ARCH, "--pin", PIN)
    assert r.rc == 0, r.err
    doc = json.loads(bake_file.read_text())
    (name, target), = doc["target"].items()

    # not pushed yet: one line naming the file, the target and the tag; no job runs
    r = world.on("smoke", "--runner", "docker", "--arch", ARCH, "--pin", PIN, "--builds", bake_file)
    assert_one_line_error(r, 2, f"{bake_file}: target {name!r}: the registry has no {target['tags'][0]}")

    built = bake_with_engine(docker_client, bake_file)
    world.built.update(built.values())
    digest = remote.remote_image(parse(target["tags"][0])).digest_ref

    results = json.loads(world.smoke("--builds", str(bake_file)).read_text())
    jobs = results["jobs"]
    assert jobs and {j["image_digest"] for j in jobs} == {digest}
    assert {j["image_id"] for j in jobs} == {built[name]}
    assert {j["profile"]: j["status"] for j in jobs}["ok"] == "pass"  # the job ran in that image

    # the content tag pushed over with other content (an image of its own over the base, so
    # the shared base image gets no registry digest): refused, naming the label
    repo, tag = split_tag(target["tags"][0])
    other, _ = docker_client.images.build(fileobj=io.BytesIO(f"FROM {world.base}\nLABEL other=1\n".encode()),
                                          rm=True)
    world.built.add(other.id)  # removed with the session's images
    docker_client.api.tag(other.id, repo, tag, force=True)
    for event in docker_client.api.push(repo, tag=tag, stream=True, decode=True):
        assert "error" not in event, event
    docker_client.api.tag(built[name], repo, tag, force=True)  # the local tag back on the bake's image
    r = world.on("smoke", "--runner", "docker", "--arch", ARCH, "--pin", PIN, "--builds", bake_file)
    assert_one_line_error(r, 2, f"{bake_file}: target {name!r}: {target['tags'][0]} names {repo}@sha256:")
    assert "not this target's image" in r.err
    assert not [d for d in docker_client.api.inspect_image(world.base).get("RepoDigests") or []
                if d.startswith(repo + "@")]  # the shared base got no registry digest


def test_a_bake_file_not_written_by_forgepatch_is_bad_input(world, tmp_path):
    bake_file = tmp_path / "docker-bake.json"
    bake_file.write_text(json.dumps({"group": {"default": {"targets": ["x"]}},
                                     "target": {"x": {"context": ".", "tags": ["r/x:1"], "labels": {}}}}))
    r = world.on("smoke", "--runner", "docker", "--arch", ARCH, "--pin", PIN, "--builds", bake_file)
    assert_one_line_error(r, 2, f"{bake_file}: target 'x' has no forgepatch.")
    bake_file.write_text(json.dumps({"target": {"x": {"context": ".", "tags": []}}}))
    r = world.on("smoke", "--runner", "docker", "--arch", ARCH, "--pin", PIN, "--builds", bake_file)
    assert_one_line_error(r, 2, f"{bake_file}: not a bake file (target.x.tags:")
