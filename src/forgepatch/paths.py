"""Where forgepatch keeps caches and finds what it ships.

``matrix.toml``, ``patches/`` and ``dockerfiles/`` are real directories at the top of the
source tree; the package build copies them into the wheel as ``forgepatch/data/...``
(``[tool.hatch.build.targets.wheel.force-include]`` in pyproject.toml). An installed wheel
finds them there, a source checkout (editable install, ``PYTHONPATH=src``) at its top.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _shipped_root() -> Path:
    built = PACKAGE_DIR / "data"
    if (built / "matrix.toml").is_file():  # a built wheel (force-included)
        return built
    return PACKAGE_DIR.parents[1]  # a source checkout: <repo>/src/forgepatch


SHIPPED_ROOT = _shipped_root()
SHIPPED_MATRIX = SHIPPED_ROOT / "matrix.toml"
SHIPPED_PATCHES = SHIPPED_ROOT / "patches"
SHIPPED_DOCKERFILES = SHIPPED_ROOT / "dockerfiles"
SHIPPED_DOCKERFILE = SHIPPED_DOCKERFILES / "Dockerfile"
IMAGE_INSTALLER = SHIPPED_DOCKERFILES / "install.py"


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
