"""From matrix.toml and a source to an ImageSpec: pick the pin, base image and wheels, check
that the source is the pin's code, run the arch's patch series (``patching.series``),
assemble the context. Shared by ``forgepatch build`` and ``forgepatch bake``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch.arch import Arch, get_arch
from forgepatch.combination import Upstream, image_tag, tag_safe
from forgepatch.patching.identity import engine_version
from forgepatch.errors import BadInput, Failure
from forgepatch.images.context import BuildContext, assemble, check_dest, secret_values
from forgepatch.images.spec import ImageSpec, SourceFacts
from forgepatch.paths import IMAGE_INSTALLER, PACKAGE_DIR, SHIPPED_DOCKERFILE, cache_dir


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
    from forgepatch.sources import pin_name

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
    changes: dict[str, str] | None = None,
) -> BuildContext:
    """Assemble the context with the shipped Dockerfile, installer and in-image package: from
    a patched package dir, or from ``upstream`` + the patch engine's ``changes``."""
    return assemble(
        dest, package=package, upstream=upstream, changes=changes, wheels=wheels or [], dockerfile=SHIPPED_DOCKERFILE,
        installer=IMAGE_INSTALLER, package_dir=PACKAGE_DIR, secrets=secret_values(),
        tar_cache=cache_dir("upstream-tars"),
    )


def default_context_dir(target_pin: str, arch: str) -> Path:
    return cache_dir("contexts") / image_tag(target_pin, arch)


@dataclass
class Prepared:
    spec: ImageSpec
    apply: dict[str, Any] = field(default_factory=dict)


def prepare(target: Target, matrix, patches_dir: Path, context_dir: Path | None = None) -> Prepared:
    """Check the source against the pin, run the arch's series on it, assemble its context."""
    dest = context_dir or default_context_dir(target.pin, target.arch.name)
    check_dest(dest)
    try:
        from forgepatch.patching.series import load_series, run_series
        from forgepatch.patching.trees import DirTree
    except ImportError as exc:
        raise Failure(f"the patch engine is not available in this build of forgepatch: {exc}") from exc
    from forgepatch.sources import resolve_source

    from forgepatch.patching.series import sglang_only

    series = sglang_only(load_series(matrix, target.arch, patches_dir), "build")
    tree = resolve_source(target.source, matrix)
    if target.pin in matrix.pins and target.source == matrix.pins[target.pin].source:
        from forgepatch.wheels import check_pin

        check_pin(target.pin, matrix.pins[target.pin], tree)  # the wheel is the one the pin records
    upstream = Upstream.of_source(tree)
    check_source_is_pin(target, upstream, tree.label)
    # in memory: the image context takes the unpatched tree (one cached layer per pin) plus
    # the files the series changed (the overlay layer)
    result = run_series(series, DirTree(tree.package, pristine=tree.pristine), tree.version)
    if result.drift:
        raise Failure(
            f"the {target.arch.name} patch series drifted on {tree.label}; "
            f"see `forgepatch apply --arch {target.arch.name} --source {target.source}`"
        )
    ctx = build_context(dest, None, upstream=Path(tree.package), wheels=target.wheels, changes=result.changed_bytes())
    spec = ImageSpec(
        target.arch, target.pin, target.repo, target.base_image, ctx, SourceFacts(upstream, matrix.upstream.repo),
        patchset=series.hash, patches=target.patches, extra_args=target.extra_args, engine=engine_version(),
    )
    doc = result.to_json()
    doc["source"], doc["upstream_revision"] = tree.label, tree.revision
    return Prepared(spec, doc)
