"""Where an SGLang package tree comes from: a PyPI release, a git revision or a local dir.

``resolve_source`` turns a SRC string into a :class:`SourceTree` whose ``package`` is the
``sglang/`` directory. PyPI wheels are downloaded once (``pip download --no-deps``) into the
cache, keyed by version and sha256, and only their ``.py`` files are extracted.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from forgepatch import progress
from forgepatch.errors import BadInput
from forgepatch.infra.gitrepo import GitRepo, clone_bare
from forgepatch.infra.journal import recover_tree
from forgepatch.packages import by_dist, packages
from forgepatch.paths import cache_dir, check_path
from forgepatch.srcspec import check_version, parse_source
from forgepatch.wheelcache import artifact_lock, unpacked_tree, verified_wheel
from forgepatch.wheels import check_pin, wheel_sha256  # noqa: F401  (sources.wheel_sha256, as before)

PACKAGE = "sglang"


@dataclass
class SourceTree:
    package: Path  # the sglang/ directory
    label: str  # "pypi:0.5.23", "git:/repo@abc123", "dir:/path"
    kind: str  # "pypi" | "git" | "dir"
    version: str | None
    revision: str | None  # wheel sha256 or full commit SHA
    pristine: bool  # an unmodified upstream tree (gates found accepting = absorbed upstream)
    origin: Path | None = None  # the wheel (pypi) or the git directory (git) the tree came from
    subdir: str | None = None  # git: the package directory inside the repository
    package_name: str = PACKAGE  # which package (``forgepatch.packages``): sglang, flashinfer, ...


# -- PyPI ---------------------------------------------------------------------------------
def pypi_wheel(version: str, dist: str = PACKAGE, expected_sha256: str | None = None) -> Path:
    """The cached wheel of ``DIST==version`` (default sglang), verified
    (``wheelcache.verified_wheel``); downloads it once. BadInput if no such release."""
    try:
        check_version(version, "--source")
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    return verified_wheel(version, expected_sha256, dist=dist)


def extract_py(wheel: Path, dest: Path, import_name: str = PACKAGE) -> Path:
    """Extract the ``.py`` files of the wheel's package into ``dest/<import_name>``; returns it."""
    with zipfile.ZipFile(wheel) as zf:
        members = [i for i in zf.infolist()
                   if i.filename.startswith(f"{import_name}/") and i.filename.endswith(".py") and ".." not in i.filename]
        for info in progress.track(members, f"unpacking the .py files of {wheel.name}"):
            target = dest / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))
    return dest / import_name


def pypi_tree(version: str, package=None, expected_sha256: str | None = None) -> SourceTree:
    """The cached ``.py`` tree of a PyPI release: sglang, or ``package`` (a
    ``packages.Package``: its distribution and import name). Unpacked once under the
    artifact's lock (``wheelcache.unpacked_tree``): a reader never sees it being replaced."""
    dist, import_name, name = (PACKAGE, PACKAGE, PACKAGE) if package is None else (
        package.dist, package.import_name, package.name)
    wheel = pypi_wheel(version, dist, expected_sha256)
    sha = wheel_sha256(wheel)
    key = f"{version}-{sha[:16]}" if name == PACKAGE else f"{dist}-{version}-{sha[:16]}"
    root = unpacked_tree(key, sha, lambda tmp: extract_py(wheel, tmp, import_name), f"the unpacked tree of {wheel.name}")
    label = f"pypi:{version}" if name == PACKAGE else f"pypi:{dist}=={version}"
    return SourceTree(root / import_name, label, "pypi", version, sha, pristine=True, origin=wheel, package_name=name)


# -- git ----------------------------------------------------------------------------------
def extract_package(wheel: Path, dest: Path, import_name: str = PACKAGE) -> Path:
    """Extract EVERY file of the wheel's package (``.py``, compiled ``.so``, configs, data)
    into ``dest/<import_name>``, executable bits kept; returns it."""
    with zipfile.ZipFile(wheel) as zf:
        members = [i for i in zf.infolist() if i.filename.startswith(f"{import_name}/") and not i.is_dir()
                   and ".." not in i.filename.split("/")]
        for info in progress.track(members, f"unpacking the package of {wheel.name}"):
            _extract(zf, info, dest / info.filename)
    return dest / import_name


def wheel_package_tree(wheel: Path, version: str, sha: str, package=None) -> SourceTree:
    """The complete package of one wheel of a PyPI release (``sha``: its sha256, checked by
    the caller): what ``build`` overlays onto a base, ``.so`` files included. Unpacked once
    (``wheelcache.unpacked_tree``)."""
    dist, import_name, name = (PACKAGE, PACKAGE, PACKAGE) if package is None else (
        package.dist, package.import_name, package.name)
    key = (f"{version}" if name == PACKAGE else f"{dist}-{version}") + f"-{sha[:16]}-full"
    root = unpacked_tree(key, sha, lambda tmp: extract_package(wheel, tmp, import_name),
                         f"the unpacked package of {wheel.name}")
    label = f"pypi:{version}" if name == PACKAGE else f"pypi:{dist}=={version}"
    return SourceTree(root / import_name, label, "pypi", version, sha, pristine=True, origin=wheel, package_name=name)


def git_tree(spec: str, package_dir: str = "python/sglang", package=None, flag: str = "--source") -> SourceTree:
    """``PATH_OR_URL@REV``: export the package at REV from git objects (no checkout touched).

    SGLang (``package`` None): its ``.py`` files (``copy_non_py`` adds the rest where a stage
    needs them). Another package (a ``packages.Package``, e.g. FlashInfer at a pin's git
    revision of it): every file of it at ``package_dir`` (else ``IMPORT/``), its CUDA sources
    and data included, as its wheel would carry them."""
    where, sep, rev = spec.rpartition("@")
    if not sep or not where or not rev:
        raise BadInput(f"{flag}: git source {spec!r} must be git:PATH_OR_URL@REV")
    if not Path(where).exists():  # a URL: a bare clone in the cache, made once
        key = hashlib.sha256(where.encode()).hexdigest()[:16]
        clone = cache_dir("git", key)
        if not (clone / "HEAD").exists():
            with artifact_lock(clone.parent / f".{key}.lock", f"the clone of {where}"):
                if not (clone / "HEAD").exists():
                    try:
                        clone_bare(where, clone)
                    except BadInput:
                        shutil.rmtree(clone, ignore_errors=True)
                        raise
        where_path = clone
    else:
        where_path = Path(where)
    repo = GitRepo(where_path, flag=flag)
    try:
        commit = repo.resolve(rev)
    except BadInput:
        raise BadInput(f"{flag}: {where} has no revision {rev!r}") from None
    top, name = (PACKAGE, PACKAGE) if package is None else (package.import_name, package.name)
    candidates = (package_dir, "python/sglang", "sglang") if package is None else (package_dir, top)
    tree = None
    for cand in dict.fromkeys(candidates):
        try:
            tree = repo.tree(commit, cand)
            break
        except BadInput:
            continue
    if tree is None:
        what = "no SGLang package" if package is None else f"no {name} package"
        raise BadInput(f"{flag}: {where}@{rev} holds {what} (looked for "
                       f"{' and '.join(c + '/' for c in dict.fromkeys(candidates))})")

    rels = tree.paths() if package is None else tree.all_paths()

    def fill(tmp: Path) -> None:
        with progress.task(f"exporting {len(rels)} file(s) of {commit[:12]} from git", total=len(rels)) as bar:
            for rel, data in zip(rels, repo.blobs([tree.blobs[r] for r in rels])):
                target = Path(tmp, top, rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                bar.advance(1)

    key = f"git-{commit}" if package is None else f"git-{name}-{commit}"
    root = unpacked_tree(key, commit, fill, f"the tree of {commit[:12]}")
    version = tree.version()
    repo.close()
    return SourceTree(root / top, f"git:{where}@{commit[:12]}", "git", version, commit, True,
                      origin=where_path, subdir=tree.package_dir, package_name=name)


def complete_tree(src: SourceTree, package=None) -> SourceTree:
    """``src`` as a complete package, every file (``.py``, CUDA sources and headers, data,
    ``.so``), for a stage that ships it (``build``): a PyPI source is the whole package of the
    very wheel ``src`` was read from (its sha256 is ``src.revision``, checked when ``src`` was
    resolved); a git source of a package besides SGLang and a directory already hold every
    file. ``package``: the ``packages.Package`` of ``src`` (None: SGLang)."""
    if src.kind == "pypi" and src.origin is not None and src.revision:
        return wheel_package_tree(src.origin, str(src.version), src.revision, package)
    return src


def wheel_dist_info(wheel: Path) -> tuple[str, dict[str, bytes]]:
    """The distribution metadata a wheel installs: its ``NAME-VERSION.dist-info`` directory's
    name and files (relative path -> bytes, as in the wheel). BadInput when it has none, or
    several."""
    with zipfile.ZipFile(wheel) as zf:
        names = [i.filename for i in zf.infolist() if not i.is_dir() and ".." not in i.filename.split("/")]
        tops = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info") and "/" in n})
        if len(tops) != 1:
            raise BadInput(f"{wheel.name}: a wheel has one .dist-info directory, this one has {len(tops)}")
        top = tops[0]
        return top, {n[len(top) + 1:]: zf.read(n) for n in sorted(names) if n.startswith(top + "/")}


# -- the files next to the sources --------------------------------------------------------
def copy_non_py(src: SourceTree, dest: Path) -> int:
    """Write the package's files other than ``.py`` (configs, kernels' ``.so``, data) into
    ``dest`` (an ``sglang/`` directory), from the wheel or the git objects the cached tree was
    extracted from; returns how many. A directory source's tree already holds them: 0."""
    dest = Path(dest)
    count = 0
    top = src.package.name  # the import package's directory in the wheel (sglang/, flashinfer/)
    if src.kind == "pypi" and src.origin is not None:
        with zipfile.ZipFile(src.origin) as zf:
            members = [i for i in zf.infolist() if i.filename.startswith(f"{top}/") and not i.is_dir()
                       and not i.filename.endswith(".py") and ".." not in i.filename.split("/")]
            with progress.task(f"unpacking {len(members)} non-.py file(s) of {src.origin.name}",
                               total=sum(i.file_size for i in members), unit="bytes") as bar:
                for info in members:
                    _extract(zf, info, dest / info.filename[len(top) + 1:])
                    bar.advance(info.file_size)
                    count += 1
    elif src.kind == "git" and src.origin is not None and src.subdir is not None:
        repo = GitRepo(src.origin, flag="--source")
        try:
            tree = repo.tree(src.revision, src.subdir)
            rels = [rel for rel in tree.blobs if not rel.endswith(".py")]
            with progress.task(f"reading {len(rels)} non-.py file(s) from git", total=len(rels)) as bar:
                for rel, data in zip(rels, repo.blobs([tree.blobs[r] for r in rels])):
                    target = dest / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
                    bar.advance(1)
                    count += 1
        finally:
            repo.close()
    return count


# -- local directory ----------------------------------------------------------------------
def dir_tree(path: Path, matrix=None) -> SourceTree:
    """A local directory holding a package: sglang first (``sglang/``, ``python/sglang/``,
    or the directory itself), then each other package the run knows (``flashinfer/``, ...)."""
    path = check_path(Path(path), "--source", "dir")
    known = packages(matrix)
    for pkg in known.values():
        imp = pkg.import_name
        for cand in dict.fromkeys((path / imp, path / pkg.package_dir, path / "python" / imp, path)):
            if cand.name == imp and (cand / "__init__.py").is_file():
                recover_tree(cand)  # an interrupted --in-place write there is finished (or undone) first
                return SourceTree(cand.resolve(), f"dir:{path}", "dir", read_version(cand), None, pristine=False,
                                  package_name=pkg.name)
    others = ", ".join(f"{p.import_name}/" for p in known.values() if p.name != PACKAGE)
    raise BadInput(f"--source: {path} holds no SGLang package (looked for sglang/ and python/sglang/"
                   + (f"; nor {others}" if others else "") + ")")


def read_version(package: Path) -> str | None:
    """The upstream version written in ``_version.py`` / ``version.py``, if a literal."""
    for name in ("_version.py", "version.py"):
        try:
            text = (package / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):  # absent, unreadable or not UTF-8: no version known
            continue
        m = re.search(r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", text, re.M)
        if m:
            return m.group(1)
    return None


_VERSION_LIKE = re.compile(r"v?[0-9]+(\.[0-9]+)+([.-]?(post|dev|rc|a|b)[0-9]*)*")


def pin_name(src: str, matrix=None) -> str | None:
    """``src`` read as a pin name of the matrix: a SRC without a ``pypi:``/``git:`` prefix that
    is no existing path and names a pin (a directory of that name wins)."""
    if matrix is None or src.startswith(("pypi:", "git:")) or os.path.lexists(src):
        return None
    return src if src in getattr(matrix, "pins", {}) else None


def pin_source(pin: str, matrix) -> str:
    """``--pin NAME`` as a SRC: the pin's name, so that ``resolve_source`` checks the wheel in
    use against what the pin records, unless a path of that name would shadow it (then the
    pin's own source string). BadInput for an unknown pin (``matrix.pin``)."""
    source = matrix.pin(pin)[1].source
    return source if os.path.lexists(pin) else pin


def source_spec(src: str | None, matrix=None) -> str:
    """The SRC string ``src`` stands for: None is the default pin, a pin name is its source."""
    if src is None:
        if matrix is None:
            raise BadInput("--source: no source given and no matrix.toml default pin")
        return matrix.pin(None)[1].source
    name = pin_name(src, matrix)
    return matrix.pins[name].source if name else src


def resolve_source(src: str | None, matrix=None) -> SourceTree:
    """SRC = ``pypi:VERSION`` | ``git:PATH_OR_URL@REV`` | DIR | a pin name; None = the
    matrix's default pin."""
    named = pin_name(src, matrix) if src is not None else (matrix.pin(None)[0] if matrix is not None else None)
    src = source_spec(src, matrix)
    if src.startswith("pypi:") and "==" in src:
        return _package_pypi(src, matrix)
    try:
        kind, where, rev = parse_source(src, "--source")
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if kind == "pypi":
        tree = pypi_tree(where)
        if named is not None:  # a pin: the wheel in use is the one it records (wheels)
            check_pin(named, matrix.pins[named], tree)
        return tree
    if kind == "git":
        package_dir = matrix.upstream.package_dir if matrix is not None else "python/sglang"
        return git_tree(f"{where}@{rev}", package_dir)
    check_path(Path(src), "--source", "any")  # too long, a loop, a dangling link: one line each
    if not Path(src).exists():
        raise BadInput(_not_a_source(src, matrix))
    return dir_tree(Path(src), matrix)


def _package_pypi(src: str, matrix) -> SourceTree:
    """``pypi:DIST==VERSION``: a release of any package the run knows (its PyPI name)."""
    dist, _, version = src[5:].partition("==")
    pkg = by_dist(dist, matrix)
    if pkg is None:
        known = ", ".join(p.dist for p in packages(matrix).values())
        raise BadInput(f"--source: {src[:80]!r}: no package has the PyPI name {dist[:60]!r} (known: {known}; "
                       f"add [packages.NAME] pypi = \"{dist[:60]}\" to matrix.toml)")
    try:
        check_version(version, f"--source pypi:{dist}==")
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    return pypi_tree(version, pkg)


def _not_a_source(src: str, matrix) -> str:
    """The one-line message for a SRC that is no prefix, no path and no pin, with a hint."""
    pins = list(getattr(matrix, "pins", {}) or {})
    if _VERSION_LIKE.fullmatch(src):
        version = src[1:] if src[0] in "vV" else src
        hint = f"for the PyPI release write pypi:{version}"
    else:
        hint = "SRC is pypi:VERSION, git:PATH_OR_URL@REV, a directory"
    if pins:
        hint += f" (or a pin: {', '.join(pins)})" if _VERSION_LIKE.fullmatch(src) else f" or a pin ({', '.join(pins)})"
    return f"--source: {src!r} is not a directory, a pin or a prefixed source; {hint}"


def _extract(zf, info, target: Path) -> None:
    """One wheel member to ``target``, its executable bits kept (a wheel's scripts, ``.so``)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zf.open(info) as fh, open(target, "wb") as out:
        shutil.copyfileobj(fh, out, 1 << 20)
    mode = (info.external_attr >> 16) & 0o777
    if mode & 0o111:
        os.chmod(target, mode)
