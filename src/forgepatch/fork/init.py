"""``forgepatch init``: scaffold matrix.toml, patches/ and dockerfiles/ in a fork checkout.

Writes a commented matrix.toml, the shipped sm120 patch as the example patch, and the
shipped Dockerfile. Refuses (exit 2) if any of those files already exists; otherwise
writes each one atomically (temp file + rename).
"""

from __future__ import annotations

from pathlib import Path

from forgepatch.atomic import write_atomic
from forgepatch.errors import BadInput, Failure
from forgepatch.paths import INIT_MATRIX

EXAMPLE_PATCH = "sm120-flashinfer-allreduce-fusion"


def plan(dest: Path) -> dict[Path, Path]:
    """target file -> shipped source file."""
    from forgepatch.paths import SHIPPED_DOCKERFILE, SHIPPED_PATCHES

    sources = sorted(p for p in SHIPPED_PATCHES.glob(f"{EXAMPLE_PATCH}.*") if p.suffix in (".toml", ".py"))
    if not sources:
        raise Failure(f"init: the shipped example patch {EXAMPLE_PATCH} is missing from {SHIPPED_PATCHES}")
    if not SHIPPED_DOCKERFILE.is_file():
        raise Failure(f"init: the shipped Dockerfile is missing ({SHIPPED_DOCKERFILE})")
    files = {dest / "matrix.toml": INIT_MATRIX}
    for src in sources:
        files[dest / "patches" / src.name] = src
    files[dest / "dockerfiles" / "Dockerfile"] = SHIPPED_DOCKERFILE
    return files


def init(dest: Path) -> list[Path]:
    """Scaffold ``dest``; returns the files written."""
    import os

    from forgepatch.paths import check_path

    dest = check_path(Path(dest), "--dir", "dir")
    if not os.access(dest, os.W_OK) or dest.resolve().parts[1:2] in (("proc",), ("sys",), ("dev",)):
        raise BadInput(f"--dir: {dest} is not a writable directory")
    files = plan(dest)
    existing = [str(p.relative_to(dest)) for p in files if p.exists() or p.is_symlink()]
    if existing:
        raise BadInput(f"init: refusing to overwrite existing {', '.join(existing)} in {dest}")
    written = []
    for target, src in files.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            write_atomic(target, src.read_bytes(), exclusive=True)  # never overwrite
        except FileExistsError:
            raise BadInput(f"init: refusing to overwrite {target}") from None
        written.append(target)
    return written
