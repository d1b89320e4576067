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
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from forgepatch.atomic import write_atomic
from forgepatch.errors import BadInput
from forgepatch.paths import cache_dir

PACKAGE = "sglang"


@dataclass
class SourceTree:
    package: Path  # the sglang/ directory
    label: str  # "pypi:0.5.23", "git:/repo@abc123", "dir:/path"
    kind: str  # "pypi" | "git" | "dir"
    version: str | None
    revision: str | None  # wheel sha256 or full commit SHA
    pristine: bool  # an unmodified upstream tree (gates found accepting = absorbed upstream)


# -- PyPI ---------------------------------------------------------------------------------
def pypi_wheel(version: str) -> Path:
    """The cached wheel of ``sglang==version``; downloads it once. BadInput if no such release."""
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version):
        raise BadInput(f"--source: {version!r} is not a version")
    root = cache_dir("wheels", version)
    found = sorted(root.glob(f"{PACKAGE}-*.whl"))
    if found:
        return found[0]
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-q",
             "--disable-pip-version-check", "-d", tmp, f"{PACKAGE}=={version}"],
            capture_output=True, text=True,
        )
        wheels = sorted(Path(tmp).glob(f"{PACKAGE}-*.whl"))
        if proc.returncode != 0 or not wheels:
            shutil.rmtree(tmp, ignore_errors=True)
            if not any(root.iterdir()):
                root.rmdir()
            if "No matching distribution" in proc.stderr or "Could not find a version" in proc.stderr:
                raise BadInput(f"--source: {PACKAGE}=={version} does not exist on PyPI")
            last = (proc.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise BadInput(f"--source: cannot download {PACKAGE}=={version}: {last}")
        dest = root / wheels[0].name
        os.replace(wheels[0], dest)
    return dest


def wheel_sha256(wheel: Path) -> str:
    """sha256 of the wheel, memoised beside it (the cached wheel never changes)."""
    memo = wheel.with_name(wheel.name + ".sha256")
    if memo.is_file() and memo.stat().st_mtime >= wheel.stat().st_mtime:
        return memo.read_text().strip()
    digest = hashlib.sha256()
    with wheel.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    write_atomic(memo, digest.hexdigest())
    return digest.hexdigest()


def extract_py(wheel: Path, dest: Path) -> Path:
    """Extract the ``.py`` files of the wheel's package into ``dest/sglang``; returns it."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if name.startswith(f"{PACKAGE}/") and name.endswith(".py") and ".." not in name:
                target = dest / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(info))
    return dest / PACKAGE


def pypi_tree(version: str) -> SourceTree:
    wheel = pypi_wheel(version)
    sha = wheel_sha256(wheel)
    root = cache_dir("trees", f"{version}-{sha[:16]}")
    package = root / PACKAGE
    if not (root / ".complete").exists():
        with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
            extract_py(wheel, Path(tmp))
            shutil.rmtree(package, ignore_errors=True)
            os.replace(Path(tmp) / PACKAGE, package)
        write_atomic(root / ".complete", sha)
    return SourceTree(package, f"pypi:{version}", "pypi", version, sha, pristine=True)


# -- git ----------------------------------------------------------------------------------
def git_tree(spec: str, package_dir: str = "python/sglang") -> SourceTree:
    """``PATH_OR_URL@REV``: export the package at REV from git objects (no checkout touched)."""
    from forgepatch.fork.gitrepo import GitRepo, clone_bare

    where, sep, rev = spec.rpartition("@")
    if not sep or not where or not rev:
        raise BadInput(f"--source: git source {spec!r} must be git:PATH_OR_URL@REV")
    if not Path(where).exists():  # a URL: a bare clone in the cache, made once
        clone = cache_dir("git", hashlib.sha256(where.encode()).hexdigest()[:16])
        if not (clone / "HEAD").exists():
            try:
                clone_bare(where, clone)
            except BadInput:
                shutil.rmtree(clone, ignore_errors=True)
                raise
        where_path = clone
    else:
        where_path = Path(where)
    repo = GitRepo(where_path, flag="--source")
    try:
        commit = repo.resolve(rev)
    except BadInput:
        raise BadInput(f"--source: {where} has no revision {rev!r}") from None
    tree = None
    for cand in dict.fromkeys((package_dir, "python/sglang", "sglang")):
        try:
            tree = repo.tree(commit, cand)
            break
        except BadInput:
            continue
    if tree is None:
        raise BadInput(f"--source: {where}@{rev} holds no SGLang package (looked for {package_dir}/ and sglang/)")
    root = cache_dir("trees", f"git-{commit}")
    if not (root / ".complete").exists():
        with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
            for rel in tree.paths():
                if rel.endswith(".py"):
                    target = Path(tmp, PACKAGE, rel)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tree.read(rel))
            shutil.rmtree(root / PACKAGE, ignore_errors=True)
            os.replace(Path(tmp) / PACKAGE, root / PACKAGE)
        write_atomic(root / ".complete", commit)
    version = tree.version()
    repo.close()
    return SourceTree(root / PACKAGE, f"git:{where}@{commit[:12]}", "git", version, commit, True)


# -- local directory ----------------------------------------------------------------------
def dir_tree(path: Path) -> SourceTree:
    path = Path(path)
    if not path.is_dir():
        raise BadInput(f"--source: {path} is not a directory")
    for cand in (path / PACKAGE, path / "python" / PACKAGE, path):
        if cand.name == PACKAGE and (cand / "__init__.py").is_file():
            from forgepatch.journal import recover_tree

            recover_tree(cand)  # an interrupted --in-place write there is finished (or undone) first
            return SourceTree(cand.resolve(), f"dir:{path}", "dir", read_version(cand), None, pristine=False)
    raise BadInput(f"--source: {path} holds no SGLang package (looked for sglang/ and python/sglang/)")


def read_version(package: Path) -> str | None:
    """The upstream version written in ``_version.py`` / ``version.py``, if a literal."""
    for name in ("_version.py", "version.py"):
        try:
            text = (package / name).read_text(encoding="utf-8")
        except OSError:
            continue
        m = re.search(r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", text, re.M)
        if m:
            return m.group(1)
    return None


def resolve_source(src: str | None, matrix=None) -> SourceTree:
    """SRC = ``pypi:VERSION`` | ``git:PATH_OR_URL@REV`` | DIR; None = the matrix's default pin."""
    if src is None:
        if matrix is None:
            raise BadInput("--source: no source given and no matrix.toml default pin")
        _, pin = matrix.pin(None)
        src = pin.source
    if src.startswith("pypi:"):
        return pypi_tree(src[5:])
    if src.startswith("git:"):
        package_dir = matrix.upstream.package_dir if matrix is not None else "python/sglang"
        return git_tree(src[4:], package_dir)
    return dir_tree(Path(src))
