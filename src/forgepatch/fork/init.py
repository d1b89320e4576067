"""``forgepatch init``: scaffold matrix.toml, patches/ and dockerfiles/ in a fork checkout.

Writes the shipped matrix.toml (every shipped arch, its patches and profiles, the default
pin; commented), an empty ``patches/`` for the fork's own patches (with a README saying
how they combine with the shipped ones) and the shipped Dockerfile. The scaffold runs as is:
the matrix names only shipped patches, which every command finds without copying them.
Refuses (exit 2) if any of those files already exists; otherwise writes the three together
through the journal (``forgepatch.infra.journal``, under ``DIR``'s lock): a crash or Ctrl-C leaves
none of them or all of them, and the next command (``init`` again, ``pin add``, ...) finishes
or undoes an interrupted one, saying so in one line.
"""

from __future__ import annotations

from pathlib import Path

from forgepatch.errors import BadInput, Failure
from forgepatch.infra import journal
from forgepatch.paths import SHIPPED_DOCKERFILE, SHIPPED_MATRIX, check_path

PATCHES_README = """\
# patches/: this fork's own patches

Patches here ADD to the patches shipped with forgepatch (`forgepatch patch list` shows
every patch and where it comes from). A file here with a shipped patch's id
(`<id>.toml` or `<id>.py`) overrides that shipped patch.

Start one with `forgepatch patch new ID --arch ARCH --from pypi:0.5.23 --function NAME`,
check it with `forgepatch patch test ID`, then list ID under `[arches.ARCH] patches` in
matrix.toml. See "Write your own patch" in forgepatch's README.
"""


def plan(dest: Path) -> dict[Path, bytes]:
    """target file -> its content."""
    for shipped, what in ((SHIPPED_MATRIX, "matrix.toml"), (SHIPPED_DOCKERFILE, "Dockerfile")):
        if not shipped.is_file():
            raise Failure(f"init: the shipped {what} is missing ({shipped})")
    return {
        dest / "matrix.toml": SHIPPED_MATRIX.read_bytes(),
        dest / "patches" / "README.md": PATCHES_README.encode(),
        dest / "dockerfiles" / "Dockerfile": SHIPPED_DOCKERFILE.read_bytes(),
    }


def init(dest: Path) -> list[Path]:
    """Scaffold ``dest``; returns the files written."""
    import os

    dest = check_path(Path(dest), "--dir", "dir")
    if not os.access(dest, os.W_OK) or dest.resolve().parts[1:2] in (("proc",), ("sys",), ("dev",)):
        raise BadInput(f"--dir: {dest} is not a writable directory")
    files = plan(dest)

    with journal.open_tree(dest, "init", write=True):
        existing = [str(p.relative_to(dest)) for p in files if p.exists() or p.is_symlink()]
        if existing:
            if all(p.is_file() and not p.is_symlink() and p.read_bytes() == data for p, data in files.items()) \
                    and "completed an interrupted init" in (journal.last_notice(dest) or ""):
                return list(files)  # this recovery just completed an interrupted init: done
            raise BadInput(f"init: refusing to overwrite existing {', '.join(existing)} in {dest}")
        journal.commit(dest, {str(p.relative_to(dest)): data for p, data in files.items()}, "init")
    return list(files)
