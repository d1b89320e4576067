"""The patch library: the patches a command can use, and where each one comes from.

The shipped patches (package data) are always there. A user patch directory (``--patches
DIR``, default ``./patches`` when it exists) ADDS to them: a user patch with a new id is one
more patch; a user patch with a shipped patch's id OVERRIDES that shipped patch (the user's
file is used, and ``forgepatch patch list`` says so). So a fork that scaffolds ``patches/``
with one patch of its own still has every shipped patch (e.g. the sm103 guard).

Every stage takes a library where it used to take a patch directory; a plain directory
(``Path``) still works as a library of exactly that directory (the internal API and tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forgepatch.errors import BadInput
from forgepatch.infra.journal import recover_tree
from forgepatch.paths import SHIPPED_PATCHES, config_patches

SHIPPED = "shipped"
USER = "user"


@dataclass(frozen=True)
class PatchFile:
    """One patch file of the library."""

    id: str
    path: Path
    origin: str  # "shipped" | "user"
    overrides: Path | None = None  # the shipped file this user patch replaces

    @property
    def origin_label(self) -> str:
        """``shipped`` · ``user`` · ``user (overrides shipped)``."""
        return f"{self.origin} (overrides shipped)" if self.overrides else self.origin


def dir_patch_files(directory: Path) -> dict[str, Path]:
    """id -> file of the patches in one directory (``<id>.toml``, ``<id>.py``; ``_*.py`` are
    helpers, not patches), after completing (or undoing) a write a run killed there left:
    a reader never lists a half-written directory, nor leaves its state directory behind."""
    recover_tree(directory)  # an interrupted `patch new` there is finished (or undone) first
    files = sorted(directory.glob("*.toml")) + sorted(
        p for p in directory.glob("*.py") if not p.name.startswith("_")
    )
    return {p.stem: p for p in files}


class PatchLibrary:
    """Shipped patches plus, optionally, a user directory whose patches add or override."""

    def __init__(self, user_dir: Path | None = None, shipped_dir: Path | None = None):
        self.shipped_dir = Path(shipped_dir) if shipped_dir is not None else SHIPPED_PATCHES
        self.user_dir = Path(user_dir) if user_dir is not None else None
        if self.user_dir is not None and self.user_dir.resolve() == self.shipped_dir.resolve():
            self.user_dir = None  # the shipped directory named explicitly: nothing to add
        self._files: dict[str, PatchFile] | None = None

    @classmethod
    def only(cls, directory: Path) -> "PatchLibrary":
        """A library of exactly one directory (its patches count as shipped)."""
        return cls(None, directory)

    @property
    def files(self) -> dict[str, PatchFile]:
        if self._files is None:
            files = {pid: PatchFile(pid, path, SHIPPED) for pid, path in dir_patch_files(self.shipped_dir).items()}
            if self.user_dir is not None:
                for pid, path in dir_patch_files(self.user_dir).items():
                    shipped = files.get(pid)
                    files[pid] = PatchFile(pid, path, USER, shipped.path if shipped else None)
            self._files = files
        return self._files

    def paths(self) -> dict[str, Path]:
        return {pid: f.path for pid, f in self.files.items()}

    def describe(self) -> str:
        """Where patches are looked up, for messages."""
        if self.user_dir is None:
            return f"shipped ({self.shipped_dir})"
        return (f"shipped ({self.shipped_dir}) + user ({self.user_dir}; a user patch adds to the shipped ones, "
                f"or overrides the shipped patch of the same id)")

    def missing(self, pid: str) -> str:
        """The message for an unknown patch id."""
        have = ", ".join(sorted(self.files)) or "none"
        where = f"{self.user_dir} or the shipped patches" if self.user_dir is not None else str(self.shipped_dir)
        return f"unknown patch {pid!r}: no {pid}.toml or {pid}.py in {where} (have: {have})"

    def __str__(self) -> str:  # so f"{patches_dir}" in older messages stays readable
        return self.describe()


def as_library(patches: "PatchLibrary | Path | str") -> PatchLibrary:
    """A library from what a caller passes: a library as is, a directory as that directory only."""
    if isinstance(patches, PatchLibrary):
        return patches
    return PatchLibrary.only(Path(patches))


def cli_library(explicit: Path | None, config: Path | None = None) -> PatchLibrary:
    """What the CLI uses: the shipped patches plus ``--patches DIR``, else the ``patches/``
    beside the matrix.toml in use (``paths.config_patches``; never the current directory's
    when the matrix is elsewhere)."""
    from forgepatch.config import default_config  # heavy: pydantic (the matrix schema)

    if explicit is not None:
        if not Path(explicit).is_dir():
            raise BadInput(f"--patches: {explicit} is not a directory")
        return PatchLibrary(Path(explicit))
    return PatchLibrary(config_patches(config if config is not None else default_config()))
