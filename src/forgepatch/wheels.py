"""Pins per platform: every wheel of a PyPI release, by tag, with its sha256.

From 0.5.12 an SGLang release is a set of CPython- and platform-specific wheels (cp311 / cp312,
x86_64 / aarch64, each with compiled ``.so`` files), so a pin records them all:
``wheels = {"cp311-manylinux_2_34_x86_64" = "<sha256>", "cp312-manylinux_2_34_aarch64" = ...}``
(tag = python tag + platform tag of the file name; a pure release has one, ``py3-any``). They
are fetched with ``pip download --no-deps --only-binary=:all: --python-version X --platform P``
for each Python and platform below, cached beside the release's host wheel. ``check_pin`` is
the pin-level check ``apply``/``build`` run: the wheel in use must have the sha256 the pin
records for its tag.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from forgepatch.errors import BadInput
from forgepatch.infra.atomic import write_atomic
from forgepatch.paths import cache_dir
from forgepatch.wheelcache import artifact_lock, file_sha256, recorded_sha256, verified_wheel

PACKAGE = "sglang"
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_34_aarch64")


def wheel_tag(filename: str) -> str:
    """``sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl`` -> ``cp311-manylinux_2_34_x86_64``;
    a pure wheel -> ``py3-any``."""
    parts = Path(filename).name[: -len(".whl")].split("-")
    if len(parts) < 5:
        raise BadInput(f"{filename}: not a wheel file name")
    py, plat = parts[-3], parts[-1]
    return f"{py}-{plat}"


def _download(version: str, dest: Path, extra: list[str]) -> list[Path]:
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "--disable-pip-version-check",
                           "-d", str(dest), *extra, f"{PACKAGE}=={version}"], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        return []
    return sorted(dest.glob(f"{PACKAGE}-*"))


def release_wheels(version: str) -> dict[str, str]:
    """tag -> sha256 of every wheel of ``sglang==version`` for PYTHONS x PLATFORMS (the sdist's
    as ``sdist`` when the release has no wheel). BadInput when nothing can be fetched."""
    root = cache_dir("wheels", version, "platforms")
    host = cache_dir("wheels", version)  # the wheel `apply` downloaded for this host, if any
    found: dict[str, Path] = {wheel_tag(p.name): p for d in (host, root) for p in d.glob(f"{PACKAGE}-*.whl")}
    for py in PYTHONS:
        for plat in PLATFORMS:
            if any(t.endswith("-any") for t in found):
                break  # a pure wheel serves every platform
            want = f"cp{py.replace('.', '')}-{plat}"
            if want in found:
                continue
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                for p in _download(version, Path(tmp), ["--only-binary=:all:", "--python-version", py,
                                                         "--platform", plat]):
                    if p.suffix == ".whl" and wheel_tag(p.name) not in found:
                        dest = root / p.name
                        os.replace(p, dest)
                        found[wheel_tag(p.name)] = dest
    if not found:
        sdists = sorted(root.glob(f"{PACKAGE}-*.tar.gz"))
        if not sdists:
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                for p in _download(version, Path(tmp), ["--no-binary=:all:"]):
                    if p.name.endswith(".tar.gz"):
                        shutil.move(str(p), root / p.name)
                        sdists = [root / p.name]
        if not sdists:
            raise BadInput(f"--pypi: no wheel or sdist of {PACKAGE}=={version} could be downloaded")
        return {"sdist": wheel_sha256(sdists[0])}
    return {tag: wheel_sha256(path) for tag, path in sorted(found.items())}


def check_pin(name: str, pin, tree) -> None:
    """The wheel ``tree`` came from must be the one pin ``name`` records for its tag
    (``wheels``; else ``sha256``, a pin recorded before per-platform pins): BadInput, one line,
    naming both digests, when it is not, or when the pin records no wheel for the tag."""
    if tree.kind != "pypi" or tree.origin is None:
        return
    tag = wheel_tag(tree.origin.name)
    have = tree.revision
    where = f"matrix.toml pins.{name}"
    if pin.wheels:
        want = pin.wheels.get(tag) or next((v for k, v in pin.wheels.items() if k.endswith("-any")), None)
        if want is None:
            raise BadInput(f"{where}.wheels records no wheel for {tag} (it has {', '.join(sorted(pin.wheels))}); "
                           f"re-record the pin: `forgepatch pin update {name}`")
        if want != have:
            raise BadInput(f"{where}.wheels.{tag}: the pin records sha256 {want[:16]}..., the wheel in use "
                           f"({tree.origin.name}) has {have[:16]}... (not the pinned wheel)")
        return
    if pin.sha256 and pin.sha256 != have:
        raise BadInput(f"{where}.sha256 is {pin.sha256[:16]}..., the wheel in use ({tree.origin.name}, {tag}) has "
                       f"{have[:16]}...: another wheel (recorded for another Python or platform?); record every "
                       f"wheel with `forgepatch pin update {name}`")


def wheel_sha256(wheel: Path) -> str:
    """sha256 of the wheel: the one recorded when it was downloaded (``verified_wheel`` has
    checked the bytes against it), else computed and recorded."""
    recorded = recorded_sha256(wheel)
    if recorded is not None:
        return recorded
    digest = file_sha256(wheel)

    write_atomic(wheel.with_name(wheel.name + ".sha256"), digest + "\n")
    return digest


# -- the wheel a base image takes ----------------------------------------------------------
# glibc of the legacy manylinux tags (PEP 513/571/599); manylinux_X_Y says it in the tag
LEGACY_GLIBC = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _glibc(text: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(text).split(".")[:2]) if text else None
    except ValueError:
        return None


def platform_glibc(plat: str, machine: str) -> tuple[int, ...] | None:
    """The glibc a platform tag needs (``manylinux_2_34_aarch64`` -> (2, 34); ``linux_x86_64``
    -> (0,): no promise); None when the tag is not a glibc Linux tag for ``machine``."""
    if not plat.endswith("_" + machine):
        return None
    stem = plat[: -len(machine) - 1]
    if stem == "linux":
        return (0,)
    if stem in LEGACY_GLIBC:
        return LEGACY_GLIBC[stem]
    parts = stem.split("_")
    if len(parts) == 3 and parts[0] == "manylinux" and parts[1].isdigit() and parts[2].isdigit():
        return (int(parts[1]), int(parts[2]))
    return None  # musllinux_*, macosx_*, win_*: not for a glibc Linux base


def fit(tag: str, python: str, machine: str, glibc: str | None) -> tuple[int, tuple[int, ...]] | None:
    """How well the wheel ``tag`` (``cp311-manylinux_2_34_x86_64``, ``py3-any``) fits a
    CPython ``python`` (``3.11``) on ``machine`` with ``glibc`` (higher is better; None: it
    does not, or the base's glibc is unknown and the tag needs one)."""
    py, _, plat = tag.partition("-")
    cp = "cp" + python.replace(".", "")
    pys = py.split(".")
    if cp in pys:
        rank = 2
    elif any(p in ("py3", "py" + python.replace(".", "")) for p in pys):
        rank = 1
    else:
        return None
    if plat == "any":
        return rank, (0,)
    need = platform_glibc(plat, machine)
    have = _glibc(glibc)
    if need is None or have is None or have < need:
        return None
    return rank, need


def choose_tag(tags, python: str, machine: str, glibc: str | None) -> str | None:
    """The tag among ``tags`` a base (CPython ``python``, ``machine``, ``glibc``) installs:
    its own CPython over a pure wheel, then the newest glibc it has. None: no tag fits."""
    fits = [(f, t) for t in tags if (f := fit(t, python, machine, glibc)) is not None]
    return max(fits)[1] if fits else None


def tag_wheel(version: str, tag: str) -> Path:
    """The cached wheel of ``sglang==version`` for ``tag``, downloaded (``pip download
    --python-version --platform``, as ``release_wheels``) when not cached yet. BadInput when
    PyPI has none."""
    host, root = cache_dir("wheels", version), cache_dir("wheels", version, "platforms")

    def cached() -> Path | None:
        return next((p for d in (host, root) for p in sorted(d.glob(f"{PACKAGE}-*.whl")) if wheel_tag(p.name) == tag),
                    None)

    if (found := cached()) is not None:
        return found
    py, _, plat = tag.partition("-")
    args = ["--only-binary=:all:"]
    if py.startswith("cp") and py[2:].isdigit():
        args += ["--python-version", f"{py[2]}.{py[3:]}"]
    if plat != "any":
        args += ["--platform", plat]
    with artifact_lock(root / f".{tag}.lock", f"the {tag} wheel of {PACKAGE}=={version}"):
        if (found := cached()) is not None:
            return found
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            for p in _download(version, Path(tmp), args):
                if p.suffix == ".whl" and wheel_tag(p.name) == tag:
                    os.replace(p, root / p.name)
                    return root / p.name
    raise BadInput(f"{PACKAGE}=={version}: no {tag} wheel could be downloaded from PyPI")


def base_wheel(name: str, pin, python: str, machine: str, glibc: str | None, ref: str) -> tuple[str, Path, str]:
    """The wheel of pin ``name`` that a base image (``ref``: CPython ``python`` on ``machine``,
    ``glibc``) installs, as (tag, cached wheel, its sha256 computed from the bytes), checked
    against the digest the pin records for that tag. BadInput, one line: no wheel of the pin
    fits the base (the base's tag and the pin's tags named), or the bytes are another wheel
    (both digests named). A pin without per-platform wheels knows only the host's wheel."""
    want_tags = dict(pin.wheels)
    if not want_tags:
        host = verified_wheel(pin.pypi, pin.sha256)
        want_tags = {wheel_tag(host.name): pin.sha256 or file_sha256(host)}
    base_tag = f"cp{python.replace('.', '')}-{machine}" + (f" (glibc {glibc})" if glibc else " (glibc unknown)")
    tag = choose_tag(want_tags, python, machine, glibc)
    if tag is None:
        hint = "" if pin.wheels else f"; the pin records no per-platform wheels: `forgepatch pin update {name}`"
        raise BadInput(f"base image {ref} is {base_tag}: pin {name} (SGLang {pin.pypi}) has no wheel for it "
                       f"(it has {', '.join(sorted(want_tags))}){hint}")
    wheel = tag_wheel(pin.pypi, tag)
    have = file_sha256(wheel)
    want = want_tags[tag]
    if have != want:
        key = f"wheels.{tag}" if pin.wheels else "sha256"
        raise BadInput(f"matrix.toml pins.{name}.{key}: the pin records sha256 {want}, the wheel for base "
                       f"image {ref} ({wheel.name}) has {have} (not the pinned wheel)")
    return tag, wheel, have
