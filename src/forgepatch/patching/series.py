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
from forgepatch.combination import PackageIdentity, Upstream
from forgepatch.errors import BadInput, located
from forgepatch.infra.tomlfile import key_line
from forgepatch.packages import get, names
from forgepatch.patching import editlock
from forgepatch.patching.model import ApplyResult, Status, Tree
from forgepatch.patching.patchset import Patch, load_patches, patchset_hash
from forgepatch.sources import git_tree, resolve_source


@dataclass(frozen=True)
class Series:
    """An arch's patch series, as configured in the matrix."""

    arch: Arch
    patches: tuple[Patch, ...]

    @property
    def hash(self) -> str:
        """The patchset hash (ordered patch ids + file hashes)."""
        return patchset_hash(list(self.patches))


def load_series(matrix: Any, arch: str | Arch, patches_dir: Any) -> Series:
    """The series ``matrix`` configures for ``arch`` (``arches.<arch>.patches``), loaded from
    ``patches_dir`` (a ``PatchLibrary``: shipped + user patches; or a directory).

    A patch listed for an arch it does not declare (its ``arches``) is a config error
    (BadInput naming matrix.toml:line), not a patch that silently never applies."""
    arch_obj = arch if isinstance(arch, Arch) else get_arch(arch)
    patches = tuple(load_patches(patches_dir, matrix.arch(arch_obj.name).patches))
    for patch in patches:
        if arch_obj.name not in patch.arches:
            raise BadInput(_undeclared(matrix, arch_obj.name, patch))
    return Series(arch_obj, patches)


def only_patches(series: Series, ids: list[str] | None, flag: str = "--patch") -> Series:
    """Part of ``series``: the patches ``ids`` names, in series order. An id not in the
    series is BadInput naming the flag and the series."""
    if not ids:
        return series
    have = [p.id for p in series.patches]
    unknown = [i for i in ids if i not in have]
    if unknown:
        raise BadInput(f"{flag} {unknown[0]}: not in the {series.arch.name} series "
                       f"(matrix.toml arches.{series.arch.name}.patches: {', '.join(have) or 'none'})")
    return Series(series.arch, tuple(p for p in series.patches if p.id in ids))


def _undeclared(matrix: Any, arch: str, patch: Patch) -> str:
    path = getattr(matrix, "path", None)
    line = None
    if path is not None:
        try:
            line = key_line(Path(path).read_text(encoding="utf-8"), ("arches", arch, "patches"))
        except OSError:
            line = None
    return located(path or "matrix.toml", line,
                   f"arches.{arch}.patches: patch {patch.id!r} does not declare {arch} "
                   f"(its arches: {', '.join(patch.arches)}; {patch.path}); add {arch!r} to the "
                   f"patch's arches or remove it from this list")


def for_package(series: Series, package: str, matrix: Any = None, flag: str = "--source") -> Series:
    """The part of ``series`` for ``package`` (each patch declares one, default sglang).

    A patch for a package the run does not know is a config error naming the patch file;
    a package the series has no patch for is refused (nothing to patch: a wrong --source)."""
    known = names(matrix)
    for patch in series.patches:
        if patch.package not in known:
            raise BadInput(located(patch.path or patch.id, None,
                                   f"package: unknown package {patch.package!r} (known: {', '.join(known)}; "
                                   f"declare it as [packages.{patch.package}] in matrix.toml)"))
    mine = tuple(p for p in series.patches if p.package == package)
    if not mine and package != "sglang":
        has = sorted({p.package for p in series.patches})
        raise BadInput(f"{flag}: the {series.arch.name} series has no patch for {package} "
                       f"(its patches are for {', '.join(has) or 'nothing'})")
    return Series(series.arch, mine)


def pin_package_tree(matrix: Any, pin: str, series: Series, name: str, what: str):
    """The pin's release of package ``name`` besides sglang (``[pins.PIN.packages.NAME]``),
    resolved (``sources.resolve_source``; a git revision: ``sources.git_tree`` in the pin's
    ``repo``, else ``[packages.NAME] repo``) and held to the wheel digest the pin records.
    BadInput (``what`` names the stage) when the pin names none: a stage never carries the
    package without the series' patches to it."""
    pin_cfg = matrix.pins.get(pin)
    pkg_pin = pin_cfg.packages.get(name) if pin_cfg is not None else None
    patch = next((p.id for p in series.patches if p.package == name), "?")
    if pkg_pin is None:
        raise BadInput(f"{what}: the {series.arch.name} series patches {name} (patch {patch}), and pin "
                       f"{pin!r} names no version of it: add [pins.\"{pin}\".packages.{name}] "
                       f"pypi = \"VERSION\" to matrix.toml")
    info = get(name, matrix)
    if pkg_pin.rev:  # a git revision of it: every file of the package there (sources.git_tree)
        src = git_tree(f"{pkg_pin.repo or info.repo or '.'}@{pkg_pin.rev}", info.package_dir, info,
                       f"pins.{pin}.packages.{name}")
    else:
        src = resolve_source(pkg_pin.source(info.dist, info.repo), matrix)
    if src.package_name != name:
        raise BadInput(f"pins.{pin}.packages.{name}: its source {src.label} holds {src.package_name}, not {name}")
    if pkg_pin.sha256 and src.revision != pkg_pin.sha256:
        raise BadInput(f"pins.{pin}.packages.{name}: the wheel of {src.label} has sha256 "
                       f"{str(src.revision)[:12]}, the pin records {pkg_pin.sha256[:12]}")
    return src


@dataclass(frozen=True)
class PackageCheckout:
    """Where the fork branch of a package besides sglang lives for a pin (``fork`` makes it,
    ``release`` checks it): a local git checkout of the package (``[pins.PIN.packages.NAME]
    repo``, else ``[packages.NAME] repo``) at the pin's git revision of it (``rev``)."""

    name: str
    checkout: Path
    rev: str
    package_dir: str  # where the package lives in the checkout


def package_checkout(matrix: Any, series: Series, pin: str, name: str, prefix: str = "") -> PackageCheckout:
    """Package ``name``'s checkout and revision for ``pin`` (see :class:`PackageCheckout`).
    BadInput, one line starting with ``prefix``, naming the keys to set: the pin names no
    version of the package, names it by a PyPI release (a branch is made on a git revision),
    or its repository is not a local directory."""
    info = get(name, matrix)
    pp = matrix.pins[pin].packages.get(name) if pin in matrix.pins else None
    patch = next((p.id for p in series.patches if p.package == name), "?")
    if pp is None or not pp.rev:
        named = "no version of it" if pp is None else f"it by its PyPI release {pp.pypi}"
        raise BadInput(f"{prefix}the {series.arch.name} series patches {name} too (patch {patch}); its fork branch "
                       f"is made in a git checkout of {name} at the pin's revision of it, and pin {pin!r} names "
                       f"{named}: set [pins.\"{pin}\".packages.{name}] rev = \"COMMIT\" and repo = \"CHECKOUT\" "
                       "in matrix.toml")
    checkout = pp.repo or (info.repo if info is not None else None)
    if not checkout or "://" in checkout or checkout.startswith("git@") or not Path(checkout).expanduser().is_dir():
        raise BadInput(f"{prefix}{name}'s repository {checkout!r} is not a local git checkout "
                       f"(set [pins.\"{pin}\".packages.{name}] repo, or [packages.{name}] repo, to one)")
    return PackageCheckout(name, Path(checkout).expanduser(), pp.rev, info.package_dir)


def packages_of(series: Series) -> list[str]:
    """The packages ``series`` patches, in the order their first patch appears."""
    return list(dict.fromkeys(p.package for p in series.patches))


def package_patchsets(series: Series) -> dict[str, str]:
    """Each package's part of ``series`` -> its patchset hash (what the image labels name)."""
    return {name: patchset_hash([p for p in series.patches if p.package == name]) for name in packages_of(series)}


def expected_packages(matrix: Any, series: Series, pin: str) -> dict[str, Any]:
    """What an image of ``pin`` must carry of every package besides sglang that ``series``
    patches (name -> ``combination.PackageIdentity``: the pin's ``[pins.PIN.packages.NAME]``
    version, wheel sha256 or revision as recorded, and the patchset of that package's part).
    A package the pin names no version of has the upstream kind ``none`` (nothing matches it).
    SGLang is left out: its upstream is the pin's own (checked as ``forgepatch.upstream``)."""
    pinned = matrix.pins[pin].packages if pin in matrix.pins else {}
    out = {}
    for name, patchset in package_patchsets(series).items():
        if name == "sglang":
            continue
        pp = pinned.get(name)
        up = (Upstream("none") if pp is None else Upstream("pypi", pp.pypi, pp.sha256) if pp.pypi
              else Upstream("git", None, pp.rev))
        out[name] = PackageIdentity(name, up, patchset)
    return out


def run_series(series: Series, tree: Tree, version: str | None, *,
               cache: MutableMapping[str, Any] | None = None, pristine: bool | None = None) -> ApplyResult:
    """Run ``series`` on ``tree`` (upstream ``version``) in memory; nothing is written.

    The result has checked itself (``patching.verify``): a gate of a patch's feature left
    rejecting the arch, or an edit made but not reported (or reported but not made), makes
    the patch ``incomplete`` and ``result.drift`` true, so no stage writes, commits, builds or
    releases it. With ``cache`` (drift scans over git blobs) only statuses are computed, and
    the same check holds.

    Each patch's edit set (what it changed, read off the trees) is then held to the patch's
    lock (``editlock``): a set the lock does not accept for the arch makes the patch
    ``review`` and ``result.drift`` true. A status-only scan runs once more with texts
    whenever it would say applied, already applied or absorbed, so a scan judges the same
    edits, and the same per-arch evaluation, as ``apply``."""
    from forgepatch.patching import verify  # heavy: libcst (the self-check)
    from forgepatch.patching.engine import run_patches  # heavy: libcst (the engine)

    patches = list(series.patches)
    result = run_patches(tree, patches, series.arch, version, cache=cache, pristine=pristine)
    texts = None
    # statuses a status-only scan cannot vouch for on its own (it does not evaluate gates)
    judged = (Status.APPLIED, Status.ALREADY, Status.ABSORBED)
    if cache is not None and any(p.status in judged for p in result.patches):
        # what the scan calls fine (applies, already, absorbed) the run with texts judges:
        # every gate of the feature evaluated per arch, and the edit set the lock holds
        texts = run_patches(tree, patches, series.arch, version, pristine=pristine)
        verify.carry_evaluation(result, texts)
    editlock.review(result, patches, texts)
    return result
