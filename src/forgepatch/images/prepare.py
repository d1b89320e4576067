"""From matrix.toml and a source to an ImageSpec: pick the pin, base image and wheels, check
that the source is the pin's code, run the arch's patch series (``patching.series``) on
every package it patches (SGLang from the source, each other package from the pin's
``[pins.NAME.packages.PKG]``), assemble the context. Shared by ``forgepatch build`` and
``forgepatch bake``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch.arch import Arch, get_arch
from forgepatch.combination import PackageIdentity, Upstream, image_tag, tag_safe
from forgepatch.patching.identity import engine_version
from forgepatch.errors import BadInput, Failure
from forgepatch.images.base_facts import BaseFacts, Wanted
from forgepatch.images.context import BuildContext, OtherPackage, assemble, check_dest, secret_values
from forgepatch.images.spec import ImageSpec, SourceFacts
from forgepatch.packages import get
from forgepatch.patching.patchset import patchset_hash
from forgepatch.patching.series import load_series, packages_of, pin_package_tree
from forgepatch.patching.service import run_arch
from forgepatch.paths import COPY_DOCKERFILE, IMAGE_INSTALLER, PACKAGE_DIR, SHIPPED_DOCKERFILE, cache_dir
from forgepatch.sources import complete_tree, pin_name, resolve_source, wheel_dist_info, wheel_package_tree
from forgepatch.wheels import base_wheel, check_pin


@dataclass
class Target:
    """One arch x pin of the matrix, with everything needed before patching."""

    arch: Arch
    pin: str
    source: str | None  # SRC string for the patch engine (None: the default pin)
    base_image: str
    wheels: list[Path]
    extra_args: dict[str, str]
    patches: list[str]
    repo: str
    pin_identity: Upstream | None = None  # what the pin records (None: a pin not in the matrix)


def resolve_target(
    matrix, arch_name: str, *, pin: str | None = None, source: str | None = None, base_image: str | None = None
) -> Target:
    """Validate the request against matrix.toml (BadInput names the key)."""
    arch = get_arch(arch_name)
    cfg = matrix.arch(arch.name)
    named = pin_name(source, matrix) if source is not None else None
    if named is not None:  # --source NAME of a pin: that pin (and, without --pin, its name)
        if pin is not None and pin != named:
            raise BadInput(f"--source {named!r} is a pin other than --pin {pin!r}: give one of them")
        source, pin = None, named
    if source is None:
        pin, pin_cfg = matrix.pin(pin)
        source = pin_cfg.source
    elif pin is None:
        pin = _pin_for_source(matrix, source)
    base = base_image or cfg.base_image
    if not base:
        raise BadInput(f"no base image for {arch.name}: set arches.{arch.name}.base_image in matrix.toml or pass --base-image")
    root = Path(matrix.path).parent if getattr(matrix, "path", None) else Path.cwd()
    wheels = []
    for entry in cfg.extra_wheels:
        wheel = (root / entry).resolve()
        if not wheel.is_file():
            raise BadInput(f"arches.{arch.name}.extra_wheels: {entry} not found (looked at {wheel})")
        wheels.append(wheel)
    known = matrix.pins.get(pin)
    target = Target(arch, pin, source, base, wheels, dict(cfg.build_args), list(cfg.patches), matrix.smoke.image_repo,
                    Upstream.of_pin(known) if known is not None else None)
    if source.startswith("pypi:"):  # cheap, before any download or engine call
        check_source_is_pin(target, Upstream("pypi", source[5:]), source)
    return target


def _pin_for_source(matrix, source: str) -> str:
    for name, pin in matrix.pins.items():
        if pin.source == source:
            return name
    return tag_safe(source.replace(":", "-"), 40)


def check_source_is_pin(target: Target, found: Upstream, label: str) -> None:
    """BadInput when the resolved source is known upstream code other than the pin's (a
    local directory carries no identity: its image is labelled ``dir`` and never released)."""
    want = target.pin_identity
    if want is None or found.kind == "dir":
        return
    if want.kind == "git" and want.revision and found.revision and found.revision.startswith(want.revision):
        return  # an abbreviated rev in the matrix: the resolved commit extends it
    if found.mismatch(want):
        raise BadInput(f"--source: {label} is {found.describe()}, but pin {target.pin!r} is {want.describe()}")


def build_context(
    dest: Path, package: Path | None, upstream: Path | None = None, wheels: list[Path] | None = None,
    changes: dict[str, str] | None = None, others: list[OtherPackage] | None = None,
    copy_files: dict[str, bytes] | None = None,
) -> BuildContext:
    """Assemble the context with the shipped Dockerfile, installer and in-image package: from
    a patched package dir, or from ``upstream`` + the patch engine's ``changes``. With
    ``copy_files`` the COPY-only Dockerfile (``Dockerfile.copy``) and those files."""
    return assemble(
        dest, package=package, upstream=upstream, changes=changes, wheels=wheels or [],
        dockerfile=COPY_DOCKERFILE if copy_files else SHIPPED_DOCKERFILE,
        installer=IMAGE_INSTALLER, package_dir=PACKAGE_DIR, secrets=secret_values(),
        tar_cache=cache_dir("upstream-tars"), others=others or [], copy_files=copy_files,
    )


def default_context_dir(target_pin: str, arch: str) -> Path:
    return cache_dir("contexts") / image_tag(target_pin, arch)


@dataclass
class Prepared:
    spec: ImageSpec
    apply: dict[str, Any] = field(default_factory=dict)
    packages: list[Wanted] = field(default_factory=list)  # every package the image carries, sglang first


def prepare(target: Target, matrix, patches_dir: Path, context_dir: Path | None = None,
            base: BaseFacts | None = None, copy_only: bool = False) -> Prepared:
    """Check the source against the pin, run the arch's series on every package it patches
    (a drift in any package: nothing is built), assemble the context. With ``base`` (the base
    image's facts) a PyPI pin's SGLang is the complete package of THE wheel of the pin that
    base installs (``base_tree``); without, the ``.py`` files of this host's wheel.
    ``copy_only`` (a base of another platform than the engine's, read from its files): the
    COPY-only Dockerfile, told where the package goes (``copy_destinations``)."""
    dest = context_dir or default_context_dir(target.pin, target.arch.name)
    check_dest(dest)
    series = load_series(matrix, target.arch, patches_dir)
    tree = base_tree(target, matrix, base) if base is not None else None
    if tree is None:
        tree = resolve_source(target.source, matrix)
        if target.pin in matrix.pins and target.source == matrix.pins[target.pin].source:
            check_pin(target.pin, matrix.pins[target.pin], tree)  # the wheel is the one the pin records
    upstream = Upstream.of_source(tree)
    check_source_is_pin(target, upstream, tree.label)
    # other packages first: a missing package pin is bad input before any patching; each is
    # carried whole (every file of the pin's wheel or revision: FlashInfer's JIT needs its
    # CUDA sources at run time), patched
    others = [(name, package_tree(matrix, target, series, name)) for name in packages_of(series) if name != "sglang"]
    # in memory: the image context takes each unpatched tree (one cached layer per pin) plus
    # the files the series changed (the overlay layers)
    runs = []
    for src in [tree] + [t for _, t in others]:
        result, _src, _tree, patches = run_arch(target.arch.name, None, matrix, patches_dir, src=src)
        if result.drift:
            raise Failure(f"the {target.arch.name} patch series drifted on {src.label}; see "
                          f"`{_drift_hint(target, src, tree is src)}`")
        runs.append((src, result, patchset_hash(patches)))
    sg_result = runs[0][1]
    extra = [OtherPackage(get(src.package_name, matrix).import_name, Path(src.package), result.changed_bytes(),
                          dist_info(src)) for src, result, _ in runs[1:]]
    copy_files, install_args = copy_destinations(target, base, extra) if copy_only else (None, {})
    ctx = build_context(dest, None, upstream=Path(tree.package), wheels=target.wheels,
                        changes=sg_result.changed_bytes(), others=extra, copy_files=copy_files)
    ids = tuple(PackageIdentity(src.package_name, Upstream.of_source(src), hash_) for src, _, hash_ in runs)
    spec = ImageSpec(
        target.arch, target.pin, target.repo, target.base_image, ctx, SourceFacts(upstream, matrix.upstream.repo),
        patchset=series.hash, patches=target.patches, extra_args=target.extra_args, engine=engine_version(),
        package_ids=ids, install_args=install_args,
    )
    doc = sg_result.to_json()
    doc["source"], doc["upstream_revision"] = tree.label, tree.revision
    doc["packages"] = [{**r.to_json(), "package": s.package_name, "source": s.label, "upstream_revision": s.revision}
                       for s, r, _ in runs]
    wanted = []
    for src, _, _ in runs:
        info = get(src.package_name, matrix)
        wanted.append(Wanted(info.name, info.dist, info.import_name, src.version))
    return Prepared(spec, doc, wanted)


def copy_destinations(target: Target, base: BaseFacts | None, others) -> tuple[dict[str, bytes], dict[str, str]]:
    """Where the COPY-only Dockerfile puts things in ``base`` (read from its files): the files
    it copies (``copy/...``) and its build args. BadInput (one line) for what it cannot do
    without running the base: extra wheels, other patched packages, a base whose python3's
    site directory or sglang directory is unknown."""
    import posixpath

    ref = target.base_image
    if base is None:
        raise BadInput(f"base image {ref}: its files were not read; cannot build it without running it")
    if target.wheels:
        raise BadInput(f"arches.{target.arch.name}.extra_wheels: installing wheels needs a RUN step in the base, "
                       f"and {ref} is of another platform than this Docker engine: build on a host of its platform")
    if others:
        raise BadInput(f"base image {ref} is of another platform than this Docker engine: the series patches "
                       f"{', '.join(o.import_name for o in others)}, which only a RUN step places; build on a host "
                       "of its platform")
    installed = base.packages.get("sglang")
    where = installed.dir if installed is not None and installed.dir else (
        posixpath.join(base.site, "sglang") if base.site else None)
    if where is None or base.site is None or posixpath.basename(where) != "sglang":
        raise BadInput(f"base image {ref}: cannot tell from its files where its python3 imports sglang from "
                       f"(site directory {base.site or 'unknown'}); build on a host of its platform")
    files = {"forgepatch-inimage.pth": b"/opt/forgepatch/inimage/python\n", "sglang-target": f"{where}\n".encode()}
    return files, {"SGLANG_PARENT": posixpath.dirname(where), "SITE_DIR": base.site}


def base_tree(target: Target, matrix, base: BaseFacts):
    """The complete package (``.py``, ``.so``, configs, data) of the wheel of the target's
    PyPI pin that ``base`` installs (its CPython, machine and glibc), checked against the
    digest the pin records for that wheel (``wheels.base_wheel``: BadInput, one line, when no
    wheel of the pin fits the base or the bytes are another wheel). None: the target is not a
    PyPI pin of the matrix (a git or directory source: its ``.py`` files, as before)."""
    pin = matrix.pins.get(target.pin)
    if pin is None or not pin.pypi or target.source != pin.source:
        return None

    _tag, wheel, sha = base_wheel(target.pin, pin, base.python, base.machine, base.glibc, target.base_image)
    return wheel_package_tree(wheel, pin.pypi, sha)


def package_tree(matrix, target: Target, series, name: str):
    """The pin's version of package ``name``, held to the wheel digest the pin records
    (:func:`forgepatch.patching.series.pin_package_tree`, the one reader of package pins), as
    a complete package (``sources.complete_tree``: every file of that very wheel, or of the
    pin's git revision), not only its ``.py`` files."""
    src = pin_package_tree(matrix, target.pin, series, name, "build")
    return complete_tree(src, get(name, matrix))


def dist_info(src) -> dict[str, bytes]:
    """The distribution metadata the image gets for a package besides SGLang: a PyPI source's
    wheel's ``NAME-VERSION.dist-info`` files (``DIR/FILE`` -> bytes, as the wheel holds them),
    installed where the image lacks that distribution; none for a git revision or directory."""
    if src.kind != "pypi" or src.origin is None:
        return {}
    top, files = wheel_dist_info(src.origin)
    return {f"{top}/{rel}": data for rel, data in files.items()}


def _drift_hint(target: Target, src, is_sglang: bool) -> str:
    """The command that shows the drift (a git revision of another package: ``drift --package``)."""
    arch = target.arch.name
    if is_sglang:
        return f"forgepatch apply --arch {arch} --source {target.source}"
    if src.kind == "git":
        return (f"forgepatch drift --arch {arch} --package {src.package_name} --repo {src.origin} "
                f"--revs {src.revision}")
    return f"forgepatch apply --arch {arch} --source {src.label}"
