"""The Docker engine, one way: every stage that talks to it (build, smoke, release, verify)
gets its client here. The docker SDK is imported lazily (``forgepatch --help`` stays fast).
"""

from __future__ import annotations

import os
from typing import Any

from forgepatch.errors import BadInput
from forgepatch.infra.refs import repository

ENGINE_HINT = (
    "start it (`sudo systemctl start docker`, or `sudo dockerd &`; tests/support/docker_engine.sh "
    "does it on a bare machine) or point DOCKER_HOST at a running engine"
)


def host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def client(timeout: int = 600) -> Any:
    """A ``docker.DockerClient`` for the engine of ``$DOCKER_HOST`` (the SDK's defaults),
    pinged; BadInput with how to start it when it does not answer."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - docker is a dependency
        raise BadInput("the docker Python SDK is missing: pip install docker") from exc
    try:
        found = docker.from_env(version="auto", timeout=timeout)
        found.ping()
    except Exception as exc:  # DockerException, requests' connection errors, bad DOCKER_HOST
        raise BadInput(f"cannot reach the Docker engine at {host()} ({type(exc).__name__}): {ENGINE_HINT}") from None
    return found


def api(timeout: int = 600) -> Any:
    """The low-level ``docker.APIClient`` of ``client()``."""
    return client(timeout).api


def streaming_api(of: Any) -> Any:
    """A second low-level client on the same engine without a read timeout, for log streams
    that can stay silent for minutes (a server loading weights)."""
    import docker

    base_url = of.api.base_url
    if base_url.startswith("http+docker://"):  # a unix socket: docker-py rewrites it
        base_url = "unix://" + of.api.adapters["http+docker://"].socket_path
    return docker.APIClient(base_url=base_url, version=of.api.api_version, timeout=None)


def image_labels(api_client: Any, ref: str) -> dict[str, str]:
    """The labels of a local image (empty when it has none)."""
    return dict(((api_client.inspect_image(ref).get("Config") or {}).get("Labels")) or {})


def repo_digest(inspected: dict[str, Any], repo: str | None = None) -> str | None:
    """The first registry digest (``repo@sha256:...``) of an inspected image, if it has one
    (with ``repo``: a digest in that repository only)."""
    digests = [d for d in inspected.get("RepoDigests") or [] if repo is None or repository(d) == repo]
    return digests[0] if digests else None
