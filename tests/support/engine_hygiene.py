"""Engine hygiene: the suite leaves the Docker engine holding what it held before.

At session start (``conftest.pytest_sessionstart``) the engine's images (every image, the
untagged step images of builds included: ``images(all=True)``) and containers are recorded;
at the end (``pytest_sessionfinish``) any image or container that was not there before is a
leak: the session fails (exit 1) and lists them with their tags, labels and parents. The
tests clean up by ID themselves (release worlds: ``release_images``; image builds: their
fixtures; failed builds: ``images_support.remove_intermediates``); this only checks it.

The check needs the engine to itself: other processes building or running on the same
engine would show up as leaks. So it runs when ``FORGEPATCH_EXCLUSIVE_ENGINE=1`` (``.ci/run``
sets it: CI owns its engine); a developer sharing an engine leaves it unset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

ENV = "FORGEPATCH_EXCLUSIVE_ENGINE"


@dataclass
class Snapshot:
    images: dict[str, list[str]] = field(default_factory=dict)  # id -> repo tags
    containers: dict[str, str] = field(default_factory=dict)  # id -> name


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


def connect() -> Any | None:
    """A client of the engine the tests use (``DOCKER_HOST`` or the default socket), or None
    when no engine answers (then the suite's docker tests fail or skip on their own)."""
    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
        return client
    except Exception:  # noqa: BLE001 - no engine: nothing to check
        return None


def snapshot(client) -> Snapshot:
    images = {img["Id"]: list(img.get("RepoTags") or []) for img in client.api.images(all=True)}
    containers = {c["Id"]: (c.get("Names") or ["?"])[0] for c in client.api.containers(all=True)}
    return Snapshot(images, containers)


def _describe_image(client, image_id: str, tags: list[str]) -> str:
    try:
        info = client.api.inspect_image(image_id)
    except Exception:  # noqa: BLE001 - removed meanwhile
        return f"{image_id[:19]} (gone)"
    labels = info.get("Config", {}).get("Labels") or {}
    mine = {k: v for k, v in labels.items() if k.startswith(("forgepatch", "org.opencontainers"))}
    what = ", ".join(t for t in tags if t != "<none>:<none>") or "untagged"
    parent = (info.get("Parent") or "")[:19]
    size = info.get("Size", 0) / 1e6
    return f"{image_id[:19]} [{what}] {size:.0f} MB" + (f" parent {parent}" if parent else "") + \
        (f" labels {dict(list(mine.items())[:3])}" if mine else "")


def leaks(client, before: Snapshot, keep: set[str] = frozenset()) -> list[str]:
    """What the engine holds now that it did not hold at ``before`` (``keep``: image refs
    allowed to appear, such as a base image the session made once), one line each."""
    now = snapshot(client)
    keep_ids = set()
    for ref in keep:
        try:
            keep_ids.add(client.api.inspect_image(ref)["Id"])
        except Exception:  # noqa: BLE001
            pass
    out = [f"image {_describe_image(client, i, tags)}" for i, tags in now.images.items()
           if i not in before.images and i not in keep_ids]
    out += [f"container {cid[:12]} {name}" for cid, name in now.containers.items() if cid not in before.containers]
    return out
