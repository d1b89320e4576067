"""The one entry point that runs an arch's patch series: load it, run it on a tree.

Every stage that patches (``apply``, ``lint``, ``fork``, ``drift``, ``build``, ``release``)
goes through :func:`load_series` and :func:`run_series`, so what one stage calls "the sm120
series on this tree" is what every other stage calls it: same patches, same order, same
patchset hash, same checks on the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, MutableMapping

from forgepatch.arch import Arch, get_arch
from forgepatch.patching.model import ApplyResult, Tree
from forgepatch.patching.patchset import Patch, load_patches, patchset_hash


@dataclass(frozen=True)
class Series:
    """An arch's patch series, as configured in the matrix."""

    arch: Arch
    patches: tuple[Patch, ...]

    @property
    def hash(self) -> str:
        """The patchset hash (ordered patch ids + file hashes)."""
        return patchset_hash(list(self.patches))


def load_series(matrix: Any, arch: str | Arch, patches_dir: Path) -> Series:
    """The series ``matrix`` configures for ``arch`` (``arches.<arch>.patches``), loaded."""
    arch_obj = arch if isinstance(arch, Arch) else get_arch(arch)
    return Series(arch_obj, tuple(load_patches(patches_dir, matrix.arch(arch_obj.name).patches)))


def run_series(series: Series, tree: Tree, version: str | None, *,
               cache: MutableMapping[str, Any] | None = None, pristine: bool | None = None) -> ApplyResult:
    """Run ``series`` on ``tree`` (upstream ``version``) in memory; nothing is written.

    The result has checked itself (``patching.verify``): a gate of a patch's feature left
    rejecting the arch, or an edit made but not reported (or reported but not made), makes
    the patch ``incomplete`` and ``result.drift`` true, so no stage writes, commits, builds or
    releases it. With ``cache`` (drift scans over git blobs) only statuses are computed, and
    the same check holds."""
    from forgepatch.patching.engine import run_patches

    return run_patches(tree, list(series.patches), series.arch, version, cache=cache, pristine=pristine)
