"""Shared fixtures: real SGLang release sources (downloaded once, cached) and Docker."""

from __future__ import annotations

import os

import pytest

# Releases whose gate layouts span DESIGN.md §4 (0.5.3 inline, 0.5.10 function + server_args,
# 0.5.15 arg_groups + backend check, 0.5.20 get_platform(), 0.5.23 layer_boundary).
RELEASES = ["0.5.3", "0.5.6", "0.5.10", "0.5.15", "0.5.20", "0.5.23"]


@pytest.fixture(scope="session")
def docker_client():
    """A real Docker engine (tests/support/docker_engine.sh starts one)."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # engine absent
        if os.environ.get("FORGEPATCH_REQUIRE_DOCKER"):
            pytest.fail(f"Docker engine required but not reachable: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    """A local base image with python3 (made by mmdebstrap + docker import)."""
    name = os.environ.get("FORGEPATCH_TEST_BASE_IMAGE", "forgepatch-test/base:bookworm")
    try:
        docker_client.images.get(name)
    except Exception:
        if os.environ.get("FORGEPATCH_REQUIRE_DOCKER"):
            pytest.fail(f"base image {name} missing: run tests/support/docker_engine.sh")
        pytest.skip(f"base image {name} missing")
    return name


# -- fork / drift: a git repository of real SGLang releases standing in for nightlies -----
@pytest.fixture(scope="session")
def nightlies_repo(tmp_path_factory):
    """Session-wide repo (read-only for tests): branch main = one commit per release in
    ``support.nightlies.NIGHTLY_RELEASES``, tagged ``v<version>``. Clone it to mutate."""
    from support.nightlies import build_nightlies_repo

    return build_nightlies_repo(tmp_path_factory.mktemp("nightlies") / "sglang")


@pytest.fixture
def nightly_clone(nightlies_repo, tmp_path):
    """A private clone of the nightlies repo a test may change."""
    from support.nightlies import clone_repo

    return clone_repo(nightlies_repo, tmp_path / "fork")
