"""The patch engine's identity: what, besides the patch files, may change the patched bytes.

The contract (``forgepatch.combination``) records it as data (image labels, cache keys); it is
computed here, where the engine's code lives, so the contract never imports the engine."""

from __future__ import annotations

import hashlib
from pathlib import Path

import forgepatch


def engine_digest() -> str:
    """sha256 of forgepatch's version and the patch engine's code (``forgepatch/patching``)."""
    here = Path(__file__).parent
    digest = hashlib.sha256(forgepatch.__version__.encode())
    for path in sorted(here.rglob("*.py")):
        digest.update(path.relative_to(here).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def engine_version() -> str:
    """``0.1.0+1a2b3c4d5e6f``: forgepatch's version and 12 hex digits of ``engine_digest``."""
    return f"{forgepatch.__version__}+{engine_digest()[:12]}"
