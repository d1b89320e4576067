"""Where forgepatch keeps caches and finds what it ships.

``matrix.toml``, ``patches/`` and ``dockerfiles/`` are real directories at the top of the
source tree; the package build copies them into the wheel as ``forgepatch/data/...``
(``[tool.hatch.build.targets.wheel.force-include]`` in pyproject.toml). An installed wheel
finds them there, a source checkout (editable install, ``PYTHONPATH=src``) at its top.
"""

from __future__ import annotations

import os
from pathlib import Path

from forgepatch.errors import BadInput

PACKAGE_DIR = Path(__file__).resolve().parent


def _shipped_root() -> Path:
    built = PACKAGE_DIR / "data"
    if (built / "matrix.toml").is_file():  # a built wheel (force-included)
        return built
    return PACKAGE_DIR.parents[1]  # a source checkout: <repo>/src/forgepatch


SHIPPED_ROOT = _shipped_root()
SHIPPED_MATRIX = SHIPPED_ROOT / "matrix.toml"
SHIPPED_PATCHES = SHIPPED_ROOT / "patches"
SHIPPED_DOCKERFILES = SHIPPED_ROOT / "dockerfiles"
SHIPPED_DOCKERFILE = SHIPPED_DOCKERFILES / "Dockerfile"
COPY_DOCKERFILE = SHIPPED_DOCKERFILES / "Dockerfile.copy"  # COPY/ADD/LABEL only: a base of another platform
IMAGE_INSTALLER = SHIPPED_DOCKERFILES / "install.py"


APPLIED_RECORDS = "applied"  # cache_dir kind of the in-place apply records (patching/undo.py); state, never pruned


def cache_dir(*parts: str) -> Path:
    """The user cache dir (``$FORGEPATCH_CACHE_DIR`` overrides); safe to delete."""
    root = os.environ.get("FORGEPATCH_CACHE_DIR")
    if not root:
        from platformdirs import user_cache_dir

        root = user_cache_dir("forgepatch")
    path = Path(root, *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def find_config(start: Path | None = None) -> Path | None:
    """The ``matrix.toml`` a command uses when ``--config`` is not given, found the way ruff
    and pre-commit find theirs: in ``start`` (the current directory) or the nearest parent,
    up to the root of the git repository ``start`` is in (that root included); outside a
    repository, only ``start`` itself. None: none found (the shipped matrix is used)."""
    here = Path.cwd() if start is None else Path(start)
    here = here.absolute()
    chain = [here, *here.parents]
    root = next((d for d in chain if (d / ".git").exists()), None)
    for d in chain if root is not None else [here]:
        candidate = d / "matrix.toml"
        if candidate.is_file():
            return candidate if d != here else Path("matrix.toml")
        if d == root:
            break
    return None


def config_patches(config: Path) -> Path | None:
    """The fork's patch directory: ``patches/`` beside its matrix.toml; with the shipped
    matrix (no matrix.toml found), ``./patches``, where `patch new` writes. None when that
    directory does not exist. Custom ``.py`` patches are imported from there only."""
    shipped = Path(config).resolve() == SHIPPED_MATRIX.resolve()
    beside = Path("patches") if shipped else Path(config).parent / "patches"
    return beside if beside.is_dir() else None


def check_path(path: Path, flag: str, want: str = "any") -> Path:
    """A path from the command line, checked before use: one-line BadInput (naming ``flag``)
    for a name too long, a symlink loop, a dangling link, a special file or the wrong kind.
    ``want``: ``dir`` (an existing directory), ``file`` (an existing regular file),
    ``new-file`` (a regular file or nothing yet, in an existing directory), ``any``."""
    import errno
    import stat

    path = Path(path)
    text = str(path)
    if "\0" in text:
        raise BadInput(f"{flag}: the path contains a NUL byte")
    shown = text if len(text) <= 120 else text[:60] + "..." + text[-40:]
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.path.islink(path):
            raise BadInput(f"{flag}: {shown} is a dangling symbolic link") from None
        if exc.errno == errno.ELOOP:
            raise BadInput(f"{flag}: {shown}: symbolic link loop") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise BadInput(f"{flag}: path too long ({len(text)} characters): {shown}") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR) and want == "new-file":
            parent = path.parent
            if not parent.is_dir():
                raise BadInput(f"{flag}: {parent} is not a directory") from None
            return path
        if exc.errno in (errno.ENOENT, errno.ENOTDIR) and want == "any":
            return path
        raise BadInput(f"{flag}: {shown}: {exc.strerror}") from None
    if want == "dir" and not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{flag}: {shown} is not a directory")
    if want in ("file", "new-file") and not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise BadInput(f"{flag}: {shown} is {kind}")
    return path


STDOUT = "-"


def check_output(path: Path | str, flag: str, *, stdout_ok: bool = False) -> Path | None:
    """The one check every output path goes through before anything is computed or written:
    a regular file (replaced atomically) or a new name in an existing directory. Never a
    device, FIFO, socket or directory, nor a symbolic link to one (or a dangling one): those
    are one line of bad input naming ``flag``. ``-`` is stdout where ``stdout_ok`` (returns
    None), else bad input too."""
    if str(path) == STDOUT:
        if stdout_ok:
            return None
        raise BadInput(f"{flag}: '-' (stdout) is not accepted here; name a file")
    path = Path(path)
    if os.path.lexists(path):
        return check_path(path, flag, "file")  # a dangling link, a loop, a special file: one line each
    check_path(path, flag, "any")  # a name too long, a NUL byte
    parent = path.absolute().parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent  # the writers make missing directories: the nearest existing one counts
    check_path(parent, flag, "dir")
    return path
