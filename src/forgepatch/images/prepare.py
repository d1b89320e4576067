"""From matrix.toml and a source to an ImageSpec: pick the pin, base image and wheels, run the
patch engine, assemble the context. Shared by ``forgepatch build`` and ``forgepatch bake``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch.arch import Arch, get_arch
from forgepatch.errors import BadInput, Failure
from forgepatch.images.context import BuildContext, assemble, check_dest, secret_values
from forgepatch.images.spec import ImageSpec, SourceFacts, tag_safe
from forgepatch.paths import DATA_DIR, SHIPPED_DOCKERFILE, cache_dir

INSTALLER = DATA_DIR / "dockerfiles" / "install.py"
PROBE_SRC = Path(__file__).resolve().parent.parent  # the forgepatch package dir


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


def resolve_target(
    matrix, arch_name: str, *, pin: str | None = None, source: str | None = None, base_image: str | None = None
) -> Target:
    """Validate the request against matrix.toml (BadInput names the key)."""
    arch = get_arch(arch_name)
    cfg = matrix.arch(arch.name)
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
    return Target(arch, pin, source, base, wheels, dict(cfg.build_args), list(cfg.patches), matrix.smoke.image_repo)


def _pin_for_source(matrix, source: str) -> str:
    for name, pin in matrix.pins.items():
        if pin.source == source:
            return name
    return tag_safe(source.replace(":", "-"), 40)


def build_context(
    dest: Path, package: Path | None, upstream: Path | None = None, wheels: list[Path] | None = None,
    changes: dict[str, str] | None = None,
) -> BuildContext:
    """Assemble the context with the shipped Dockerfile, installer and probe: from a patched
    package dir, or from ``upstream`` + the patch engine's ``changes``."""
    return assemble(
        dest, package=package, upstream=upstream, changes=changes, wheels=wheels or [], dockerfile=SHIPPED_DOCKERFILE,
        installer=INSTALLER, probe_src=PROBE_SRC, secrets=secret_values(), tar_cache=cache_dir("upstream-tars"),
    )


def default_context_dir(target_pin: str, arch: str) -> Path:
    return cache_dir("contexts") / f"{tag_safe(target_pin)}-{arch}"


@dataclass
class Prepared:
    spec: ImageSpec
    apply: dict[str, Any] = field(default_factory=dict)


def prepare(target: Target, matrix, patches_dir: Path, context_dir: Path | None = None) -> Prepared:
    """Run the patch engine for ``target`` and assemble its build context."""
    dest = context_dir or default_context_dir(target.pin, target.arch.name)
    check_dest(dest)
    try:
        from forgepatch.patching.service import apply_arch
    except ImportError as exc:
        raise Failure(f"the patch engine is not available in this build of forgepatch: {exc}") from exc

    # out=None: the engine patches in memory and returns the changed files; the image context
    # takes the unpatched tree (one cached layer per pin) plus those files (the overlay layer).
    run = apply_arch(target.arch.name, target.source, None, matrix, patches_dir)
    tree, result = run.source, run.result
    if result.drift:
        raise Failure(
            f"the {target.arch.name} patch series drifted on {tree.label}; "
            f"see `forgepatch apply --arch {target.arch.name} --source {target.source}`"
        )
    ctx = build_context(dest, None, upstream=Path(tree.package), wheels=target.wheels, changes=result.changed)
    facts = SourceFacts(tree.label, tree.version, tree.revision, matrix.upstream.repo)
    spec = ImageSpec(
        target.arch, target.pin, target.repo, target.base_image, ctx, facts,
        patchset=result.patchset_hash, patches=target.patches, extra_args=target.extra_args,
    )
    return Prepared(spec, run.to_json())
