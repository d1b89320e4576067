"""The deterministic Docker build context: what goes in, in which order, and its digest.

Layout (the shipped Dockerfile reads exactly this)::

    Dockerfile
    wheels/<name>.whl         extra wheels of the arch (installed offline)
    inimage/install.py        the in-image installer (dockerfiles/install.py)
    inimage/python/forgepatch/  what runs inside the image: the whole ``forgepatch.inimage``
                              package (probe, server driver, monitor, ...) and the stdlib-only
                              modules it shares with the host (IMAGE_FILES)
    upstream/sglang.tar.gz    the pin's unpatched package as ONE deterministic gzipped tar
                              (thousands of small files, or 70 MB of them, cost the engine
                              time on every build); cached per upstream tree, so only the first
                              build of a pin packs it
    upstream/removed.txt      package files the patches deleted, one per line
    upstream/packages.txt     the other packages the series patches, by import name (one a line)
    upstream/<name>.tar.gz    each one's unpatched package (``<name>/...`` members), every file
                              of it (FlashInfer's CUDA sources and headers too), cached alike
    upstream/dist-info/<name>/<DIST-VERSION>.dist-info/
                              the distribution metadata of each one from a PyPI wheel (as the
                              wheel holds it), installed where the base lacks that distribution
    overlay-packages/<name>/  files of each other package that differ from its upstream
    overlay/sglang/           files that differ from upstream (the whole patched package goes
                              to upstream/sglang.tar.gz when no upstream tree is given)
    copy/                     with the COPY-only Dockerfile (a base of another platform): the
                              .pth and the sglang-target record it copies into place

Entries are sorted, modes normalised (0644 / 0755), mtimes and owners fixed, so the same inputs
give the same tar stream and the same digest on every machine. ``.git``, ``__pycache__`` and
bytecode are never copied. A file holding the value of a secret-looking environment variable
(``HF_TOKEN`` ...) is refused: secrets are runtime-only (the patched tree is scanned on every
assembly, the upstream tree when its tar is made).

The context directory is kept between builds and synced: only files whose content changed are
rewritten (each through a temp file + rename), stale ones removed, and the manifest file
``.forgepatch-context.json`` is written last. A non-empty directory without that manifest is
never touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tarfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from forgepatch.infra.atomic import write_atomic
from forgepatch.errors import BadInput
from forgepatch.images.archive import (
    FIXED_MTIME, Sink, StagedFile, package_files, read_file, tarinfo, upstream_tar,
)

MANIFEST = ".forgepatch-context.json"
UPSTREAM_TAR = "upstream/sglang.tar.gz"
PACKAGES_LIST = "upstream/packages.txt"
DIST_INFO = "upstream/dist-info"  # <import name>/<DIST-VERSION>.dist-info/<file>
OTHER_OVERLAY = "overlay-packages"
REQUIRED_DIRS = ("wheels", "overlay/sglang", OTHER_OVERLAY)
IMPORT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# What every image carries of forgepatch (paths relative to the package dir), copied whole:
# the in-image package and the stdlib-only modules it imports. Nothing else of forgepatch
# (typer, rich, libcst, git, docker, pydantic are not in the image).
IMAGE_FILES = ("__init__.py", "arch.py", "errors.py", "inimage/")
IMAGE_PREFIX = "inimage/python/forgepatch"

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL", re.I)
MIN_SECRET_LEN = 8


def secret_values(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables that look like secrets (name -> value), values long enough to
    search for without false positives."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_LEN}


@dataclass(frozen=True)
class OtherPackage:
    """A package besides SGLang that the image carries patched: its import name, its
    unpatched tree and the patch engine's changes to it (package-relative path -> bytes)."""

    import_name: str
    upstream: Path
    changes: dict[str, bytes | str] = field(default_factory=dict)
    dist_info: dict[str, bytes] = field(default_factory=dict)  # "DIST-VERSION.dist-info/FILE" -> bytes (a wheel's)


@dataclass(frozen=True)
class Entry:
    path: str  # POSIX, relative to the context root
    is_dir: bool
    mode: int  # normalised permission bits
    size: int = 0
    sha256: str = ""

    def line(self) -> str:
        kind = "d" if self.is_dir else "f"
        return f"{kind} {self.mode:04o} {self.size} {self.sha256 or '-'} {self.path}\n"


@dataclass
class BuildContext:
    root: Path
    entries: list[Entry]
    digest: str  # sha256 over the sorted entry lines (content, mode, size, path)
    overlay_files: list[str] = field(default_factory=list)  # package-relative
    removed_files: list[str] = field(default_factory=list)
    wheels: list[tuple[str, str]] = field(default_factory=list)  # (file name, sha256)
    image_modules: list[str] = field(default_factory=list)  # forgepatch files in the image
    package_overlays: dict[str, list[str]] = field(default_factory=dict)  # other package -> changed files
    files_written: int = 0  # how many files this assembly had to (re)write

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    def write_tar(self, fileobj: BinaryIO) -> None:
        """The context as an uncompressed tar: sorted, fixed mtime, root-owned."""
        for chunk in self.tar_chunks():
            fileobj.write(chunk)

    def tar_chunks(self, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The same tar as a stream of chunks (sent to the engine without a temp file)."""
        sink = Sink()
        with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for entry in self.entries:
                if entry.is_dir:
                    tar.addfile(tarinfo(entry.path, entry.mode, is_dir=True))
                else:
                    with open(self.root / entry.path, "rb") as fh:
                        tar.addfile(tarinfo(entry.path, entry.mode, entry.size), fh)
                if sink.size >= chunk_size:
                    yield sink.take()
        yield sink.take()


class _Plan:
    """The context's files (rel -> StagedFile), secret-scanned as they are added."""

    def __init__(self, secrets: dict[str, str]):
        self.files: dict[str, StagedFile] = {}
        self.secrets = {k: v.encode() for k, v in secrets.items()}

    def scan(self, data: bytes, origin: object) -> None:
        for name, value in self.secrets.items():
            if value in data:
                raise BadInput(
                    f"{origin}: contains the value of ${name}; refusing to put a secret into an image "
                    "(tokens are runtime environment only)"
                )

    def put(self, rel: str, data: bytes, origin: object, mode: int = 0o644) -> None:
        self.scan(data, origin)
        self.files[rel] = StagedFile(data, None, mode, len(data), hashlib.sha256(data).hexdigest())

    def entries(self) -> list[Entry]:
        dirs = set(REQUIRED_DIRS)
        for rel in list(self.files) + list(REQUIRED_DIRS):
            parts = rel.split("/")
            dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        out = [Entry(d, True, 0o755) for d in dirs]
        out += [Entry(rel, False, f.mode, f.size, f.sha256) for rel, f in self.files.items()]
        return sorted(out, key=lambda e: e.path)


def assemble(
    dest: Path,
    *,
    package: Path | None = None,
    upstream: Path | None = None,
    changes: dict[str, bytes | str] | None = None,
    wheels: Iterable[Path] = (),
    dockerfile: Path,
    installer: Path,
    package_dir: Path,
    secrets: dict[str, str] | None = None,
    tar_cache: Path | None = None,
    others: Iterable[OtherPackage] = (),
    copy_files: dict[str, bytes] | None = None,
) -> BuildContext:
    """Write (sync) the build context into ``dest`` and return it with its digest.

    The patched package is either ``package`` (a patched ``sglang/`` dir) or ``upstream`` plus
    ``changes`` (package-relative path -> new text, what the patch engine returns). With
    ``upstream`` only the files that differ from it go to the overlay layer. ``package_dir`` is
    the ``forgepatch`` package dir (``IMAGE_FILES`` come from it); ``tar_cache`` a directory
    keeping upstream tars between runs. ``others``: the other packages the series patches
    (their unpatched trees and changes), each overlaid where the image imports it from.
    """
    if (package is None) == (changes is None):
        raise ValueError("assemble: pass exactly one of package= or changes=")
    if package is not None:
        _check_package(package, "patched package")
    if upstream is not None:
        _check_package(upstream, "upstream package")
    elif changes is not None:
        raise ValueError("assemble: changes= needs upstream=")
    others = list(others)
    for other in others:
        if not IMPORT_NAME.fullmatch(other.import_name) or other.import_name == "sglang":
            raise BadInput(f"package {other.import_name!r}: not an import name of a package besides sglang")
        _check_package(other.upstream, f"upstream package {other.import_name}")
    if len({o.import_name for o in others}) != len(others):
        raise BadInput("build context: two packages share an import name")
    wheels = [Path(w) for w in wheels]
    for wheel in wheels:
        if wheel.suffix != ".whl" or not wheel.is_file():
            raise BadInput(f"extra wheel {wheel}: not a .whl file")
    if len({w.name for w in wheels}) != len(wheels):
        raise BadInput("extra wheels: two wheels share a file name")

    dest = Path(dest).absolute()
    plan = _Plan(secrets or {})
    try:
        ctx = _plan(plan, package and Path(package), upstream and Path(upstream), changes, wheels, dockerfile,
                    installer, Path(package_dir), tar_cache, others)
        if copy_files:  # the COPY-only Dockerfile's files (copy/NAME), digest made again with them
            for name, data in sorted(copy_files.items()):
                plan.put(f"copy/{name}", data, f"copy/{name}")
            ctx.entries = plan.entries()
            ctx.digest = hashlib.sha256("".join(e.line() for e in ctx.entries).encode()).hexdigest()
        ctx.files_written = _sync(plan, ctx.entries, dest)
    except OSError as exc:
        where = exc.filename or dest
        raise BadInput(f"cannot write the build context to {dest}: {where}: {exc.strerror or exc}") from exc
    ctx.root = dest
    return ctx


def check_dest(dest: Path) -> None:
    """Fail fast (before any patching) when ``dest`` cannot become a build context."""
    dest = Path(dest).absolute()
    if dest.exists() and not dest.is_dir():
        raise BadInput(f"cannot write the build context to {dest}: not a directory")
    if dest.is_dir() and not (dest / MANIFEST).is_file() and any(dest.iterdir()):
        raise BadInput(f"build context dir {dest} is not empty and not a forgepatch context; refusing to overwrite it")
    probe = dest / f".write-test-{uuid.uuid4().hex[:8]}"
    try:
        dest.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise BadInput(f"cannot write the build context to {dest}: {exc.strerror or exc}") from exc


def _check_package(package: Path, what: str) -> None:
    if not (Path(package) / "__init__.py").is_file():
        raise BadInput(f"{what} {package}: not a Python package directory (no __init__.py)")


def _plan(plan, package, upstream, changes, wheels, dockerfile, installer, package_dir, tar_cache,
          others=()) -> BuildContext:
    plan.put("Dockerfile", Path(dockerfile).read_bytes(), dockerfile)
    plan.put("inimage/install.py", Path(installer).read_bytes(), installer)
    image_modules = image_files(package_dir)
    for rel in image_modules:
        src = package_dir / rel
        plan.put(f"{IMAGE_PREFIX}/{rel}", src.read_bytes(), src)

    wheel_facts = []
    for wheel in sorted(wheels, key=lambda p: p.name):
        data = wheel.read_bytes()
        plan.put(f"wheels/{wheel.name}", data, wheel)
        wheel_facts.append((wheel.name, hashlib.sha256(data).hexdigest()))

    contents: dict[str, bytes] = {}  # patched files that may differ from upstream
    origins: dict[str, object] = {}
    if package is not None:
        patched: dict[str, str] = {}  # rel -> sha256 (content scanned for secrets)
        for rel, path in package_files(package).items():
            data = read_file(path)
            plan.scan(data, path)
            patched[rel] = hashlib.sha256(data).hexdigest()
            contents[rel], origins[rel] = data, path
        plan.files[UPSTREAM_TAR], pristine = upstream_tar(upstream or package, tar_cache, plan.scan)
    else:
        plan.files[UPSTREAM_TAR], pristine = upstream_tar(upstream, tar_cache, plan.scan)
        patched = dict(pristine)
        for rel, text in sorted(changes.items()):
            if not _safe_rel(rel):
                raise BadInput(f"patched file {rel!r}: not a path inside the package")
            data = text if isinstance(text, bytes) else text.encode("utf-8")
            plan.scan(data, f"patched {rel}")
            patched[rel] = hashlib.sha256(data).hexdigest()
            contents[rel], origins[rel] = data, f"patched {rel}"

    overlay = sorted(rel for rel, sha in patched.items() if pristine.get(rel) != sha)
    removed = sorted(rel for rel in pristine if rel not in patched)
    for rel in overlay:
        plan.put(f"overlay/sglang/{rel}", contents[rel], origins[rel])
    plan.put("upstream/removed.txt", "".join(r + "\n" for r in removed).encode(), "removed files")
    package_overlays = {o.import_name: _plan_other(plan, o, tar_cache) for o in others}
    plan.put(PACKAGES_LIST, "".join(n + "\n" for n in package_overlays).encode(), "package list")

    entries = plan.entries()
    digest = hashlib.sha256("".join(e.line() for e in entries).encode()).hexdigest()
    return BuildContext(Path(), entries, digest, overlay, removed, wheel_facts, image_modules, package_overlays)


def _plan_other(plan: _Plan, other: OtherPackage, tar_cache) -> list[str]:
    """One other package: its unpatched tar, its distribution metadata and the files the
    series changed in it."""
    name = other.import_name
    plan.files[f"upstream/{name}.tar.gz"], pristine = upstream_tar(other.upstream, tar_cache, plan.scan, prefix=name)
    tops = {rel.split("/", 1)[0] for rel in other.dist_info}
    if other.dist_info and (len(tops) != 1 or not next(iter(tops)).endswith(".dist-info")):
        raise BadInput(f"package {name}: its distribution metadata is not one DIST-VERSION.dist-info directory")
    for rel, data in sorted(other.dist_info.items()):
        if not _safe_rel(rel):
            raise BadInput(f"distribution metadata {rel!r} of {name}: not a path inside its .dist-info")
        plan.put(f"{DIST_INFO}/{name}/{rel}", data, f"{name} {rel}")
    overlay = []
    for rel, text in sorted(other.changes.items()):
        if not _safe_rel(rel):
            raise BadInput(f"patched file {name}/{rel}: not a path inside the package")
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        if pristine.get(rel) == hashlib.sha256(data).hexdigest():
            continue
        plan.put(f"{OTHER_OVERLAY}/{name}/{rel}", data, f"patched {name}/{rel}")
        overlay.append(rel)
    return overlay


def _safe_rel(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def image_files(package_dir: Path) -> list[str]:
    """The ``forgepatch`` files every image carries (``IMAGE_FILES``; a directory entry means
    every ``.py`` file below it), relative to ``package_dir``."""
    out = []
    for entry in IMAGE_FILES:
        path = package_dir / entry
        if entry.endswith("/"):
            found = sorted(p.relative_to(package_dir).as_posix() for p in path.rglob("*.py")
                           if "__pycache__" not in p.parts)
            if not found:
                raise BadInput(f"in-image package {path} is missing")
            out += found
        elif path.is_file():
            out.append(entry)
        else:
            raise BadInput(f"in-image module {path} is missing")
    return out


def _sync(plan: _Plan, entries: list[Entry], dest: Path) -> int:
    """Make ``dest`` hold exactly ``entries``; returns how many files were (re)written."""
    manifest_path = dest / MANIFEST
    old: dict[str, list] = {}
    if dest.exists():
        if not dest.is_dir():
            raise NotADirectoryError(20, "not a directory", str(dest))
        if manifest_path.is_file():
            try:
                old = json.loads(manifest_path.read_text())["files"]
            except (ValueError, KeyError, TypeError):
                old = {}
        elif any(dest.iterdir()):
            raise BadInput(f"build context dir {dest} is not empty and not a forgepatch context; refusing to overwrite it")
    dest.mkdir(parents=True, exist_ok=True)

    wanted = {e.path: e for e in entries}
    written = 0
    for e in entries:
        path = dest / e.path
        if e.is_dir:
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                path.unlink()
            path.mkdir(parents=True, exist_ok=True)
            continue
        try:
            st = os.lstat(path)
            fresh = (
                old.get(e.path) == [e.sha256, e.mode, e.size]
                and stat.S_ISREG(st.st_mode) and st.st_size == e.size and int(st.st_mtime) == FIXED_MTIME
            )
        except FileNotFoundError:
            fresh = False
        if not fresh:
            f = plan.files[e.path]
            _write_file(path, f.data if f.data is not None else Path(f.path), e.mode)
            written += 1

    for dirpath, dirnames, filenames in os.walk(dest, topdown=False):
        for name in filenames:
            rel = Path(dirpath, name).relative_to(dest).as_posix()
            if rel != MANIFEST and rel not in wanted:
                os.unlink(Path(dirpath, name))
        for name in dirnames:
            rel = Path(dirpath, name).relative_to(dest).as_posix()
            if rel not in wanted:
                p = Path(dirpath, name)
                p.unlink() if p.is_symlink() else os.rmdir(p)
    for e in entries:
        if e.is_dir:
            os.utime(dest / e.path, (FIXED_MTIME, FIXED_MTIME))
    doc = {"files": {e.path: [e.sha256, e.mode, e.size] for e in entries if not e.is_dir}}
    _write_file(manifest_path, json.dumps(doc, sort_keys=True).encode(), 0o644)
    return written


def _write_file(path: Path, data: bytes | Path, mode: int) -> None:
    """Write ``data`` (bytes, or a file to copy) to ``path`` atomically, with the context's
    fixed mode and mtime."""
    write_atomic(path, data, mode=mode, mtime=FIXED_MTIME)
