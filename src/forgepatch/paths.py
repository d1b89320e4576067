"""Where forgepatch keeps caches and finds its shipped data."""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
SHIPPED_MATRIX = DATA_DIR / "matrix.toml"
SHIPPED_PATCHES = DATA_DIR / "patches"
SHIPPED_DOCKERFILE = DATA_DIR / "dockerfiles" / "Dockerfile"


def cache_dir(*parts: str) -> Path:
    """The user cache dir (``$FORGEPATCH_CACHE_DIR`` overrides); safe to delete."""
    root = os.environ.get("FORGEPATCH_CACHE_DIR")
    if not root:
        from platformdirs import user_cache_dir

        root = user_cache_dir("forgepatch")
    path = Path(root, *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_config(explicit: Path | None = None) -> Path:
    """``--config`` if given, else ``./matrix.toml``, else the shipped default."""
    if explicit is not None:
        return explicit
    local = Path("matrix.toml")
    return local if local.is_file() else SHIPPED_MATRIX


def default_patches(explicit: Path | None = None) -> Path:
    """``--patches`` if given, else ``./patches``, else the shipped patches."""
    if explicit is not None:
        return explicit
    local = Path("patches")
    return local if local.is_dir() else SHIPPED_PATCHES
