"""An image pushed to two repositories of the local registry (a mirror) has one RepoDigest
per repository, the same sha256 (issue 28 item 6): the digest smoke records is the one of the
repository the job's image was pulled from, and release compares digests by their sha256,
never by repository name (it refused such an image for good before: "ran on OTHER@sha256:X,
the image is now REPO@sha256:X")."""

from __future__ import annotations

import uuid

import pytest

from forgepatch.infra.dockerapi import repo_digest
from forgepatch.infra.refs import repository, same_digest

pytestmark = pytest.mark.docker


def test_the_digest_of_the_pulled_repository_and_digest_equality(docker_client, base_image, registry):
    api = docker_client.api
    tag = uuid.uuid4().hex[:8]
    mirror, main = registry.repo(f"mirror-{tag}/img"), registry.repo(f"main-{tag}/img")
    image = docker_client.images.get(base_image)
    pushed = []
    try:
        for repo in (mirror, main):  # the mirror first: its digest is listed first
            image.tag(repo, "v1")
            pushed.append(f"{repo}:v1")
            for _ in api.push(repo, "v1", stream=True, decode=True):
                pass
        inspected = api.inspect_image(f"{main}:v1")
        digests = inspected.get("RepoDigests") or []
        assert {d.partition("@")[0] for d in digests} >= {mirror, main}, digests
        ours = repo_digest(inspected, repository(f"{main}:v1"))
        assert ours is not None and ours.startswith(main + "@sha256:")
        other = next(d for d in digests if d.startswith(mirror + "@"))
        assert same_digest(other, ours)  # the same bytes under two names: release accepts
        assert not same_digest(ours, ours.rpartition("@")[0] + "@sha256:" + "0" * 64)
    finally:
        for ref in pushed:
            try:
                api.remove_image(ref)
            except Exception:  # noqa: BLE001 - best effort, only our own tags
                pass
