"""The artifact cache, verified like pip's hash-checking mode, and written race-free.

Cached wheels live in ``<cache>/wheels/VERSION/`` with the sha256 recorded when they were
downloaded beside them (``NAME.whl.sha256``). ``verified_wheel`` checks the cached file's bytes
against that record, or against the sha256 the caller expects (a pin's), before every use: a
damaged file (truncated, zero bytes, not a zip, another release's bytes under this name, a
swapped file) is removed and downloaded again, or refused with one line when it cannot be.

Every artifact (a wheel, an unpacked source tree) is made under its own lock
(``artifact_lock``): concurrent cold runs download and unpack it once, the others wait and
then use it. Downloads and unpacks go to temporary names (``.tmp-*``) in the same directory,
renamed into place when complete; a complete tree is never replaced, so a reader never sees
a tree being rewritten. Temporary names left by a run that was killed are removed by the next
holder of the lock.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from forgepatch import envsettings, progress
from forgepatch.errors import BadInput, Failure
from forgepatch.infra.atomic import write_atomic
from forgepatch.infra.journal import flock_waiting
from forgepatch.paths import cache_dir

PACKAGE = "sglang"
TMP_PREFIX = ".tmp-"
COMPLETE = ".complete"
# a download may take minutes: a run waits this long for another one making the same artifact
# (``$FORGEPATCH_LOCK_TIMEOUT`` when set)
DEFAULT_WAIT_S = 900.0


def _wait_s() -> float:
    if os.environ.get(envsettings.LOCK_TIMEOUT.name):
        return envsettings.LOCK_TIMEOUT.read()
    return DEFAULT_WAIT_S


def _say(message: str) -> None:
    print(f"forgepatch: {message}", file=sys.stderr, flush=True)


@contextmanager
def artifact_lock(lock_path: Path, what: str) -> Iterator[None]:
    """Hold ``lock_path`` (flock, exclusive) while making ``what``; another run making it
    waits (one line said once), up to the lock timeout."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        flock_waiting(fd, _wait_s(), notice_after=0.0, poll=0.1,
                      waiting=lambda: _say(f"waiting for another forgepatch run making {what}"),
                      gave_up=lambda: Failure(f"{lock_path}: another forgepatch run is still making {what}; gave up "
                                              "waiting (FORGEPATCH_LOCK_TIMEOUT); try again when it has finished"))
        yield
    finally:
        os.close(fd)  # closing releases the lock; the lock file stays (it is tiny and reused)


def remove_debris(directory: Path) -> None:
    """Remove temporary names a killed run left in ``directory`` (call holding its lock)."""
    try:
        entries = list(directory.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(TMP_PREFIX):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _memo(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + ".sha256")


def recorded_sha256(wheel: Path) -> str | None:
    """The sha256 recorded beside ``wheel`` when it was downloaded, if any."""
    try:
        text = _memo(wheel).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if re.fullmatch(r"[0-9a-f]{64}", text) else None


def wheel_prefix(dist: str) -> str:
    """A distribution's name as wheel files and ``.dist-info`` directories spell it."""
    return re.sub(r"[-_.]+", "_", dist)


def _wheel_problem(wheel: Path, version: str, want: str | None, distribution: str = PACKAGE) -> str | None:
    """Why ``wheel`` cannot be used as the wheel of ``dist==version`` (None: it can)."""
    try:
        size = wheel.stat().st_size
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if size == 0:
        return "is empty (zero bytes)"
    actual = file_sha256(wheel)
    if want is not None and actual != want:
        return f"has sha256 {actual[:16]}..., expected {want[:16]}..."
    if not zipfile.is_zipfile(wheel):
        return "is not a zip archive (truncated or damaged)"
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        return f"is not a readable wheel ({exc})"
    dist_infos = {n.split("/", 1)[0] for n in names if ".dist-info/" in n}
    prefix = wheel_prefix(distribution).lower()
    infos = {d for d in dist_infos}
    if not any(_same_version(d.split("-", 1)[1].removesuffix(".dist-info"), version)
               for d in infos if "-" in d and wheel_prefix(d.split("-", 1)[0]).lower() == prefix):
        found = ", ".join(sorted(infos)) or "no .dist-info"
        return f"holds another release ({found})"
    return None


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def verified_wheel(version: str, expected_sha256: str | None = None,
                   download: Callable[[str, Path], Path] | None = None, dist: str = PACKAGE) -> Path:
    """The cached wheel of ``dist==version`` (default sglang), its bytes checked against
    ``expected_sha256`` (a pin's) or, without one, the sha256 recorded when it was downloaded;
    a damaged or swapped file is removed and downloaded again. Downloads once across
    concurrent runs. sglang's wheels live in ``wheels/VERSION``, another package's in
    ``wheels/DIST-VERSION``."""
    if download is None:
        def download(v: str, into: Path) -> Path:
            return pip_download(v, into, dist)
    key = version if dist == PACKAGE else f"{dist}-{version}"
    root = cache_dir("wheels", key)
    with artifact_lock(root.parent / f".{key}.lock", f"the wheel of {dist}=={version}"):
        remove_debris(root)
        for wheel in sorted(root.glob(f"{wheel_prefix(dist)}-*.whl")):
            recorded = recorded_sha256(wheel)
            want = expected_sha256 or recorded
            problem = _wheel_problem(wheel, version, want, dist)
            if problem is None and expected_sha256 and recorded and recorded != expected_sha256:
                problem = "was recorded with another sha256 than expected"
            if problem is None:
                if recorded is None:  # a cache from before the record: record it now
                    _record(wheel, file_sha256(wheel))
                return wheel
            _say(f"cached wheel {wheel} {problem}; removed, downloading it again")
            wheel.unlink(missing_ok=True)
            _memo(wheel).unlink(missing_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + "download-", dir=root))
        try:
            got = download(version, tmp)
            problem = _wheel_problem(got, version, expected_sha256, dist)
            if problem is not None:
                raise BadInput(f"--source: the downloaded wheel of {dist}=={version} ({got.name}) {problem}")
            sha = file_sha256(got)
            dest = root / got.name
            _record(dest, sha)  # the record first: a wheel is never in place without it
            os.replace(got, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest


def _record(wheel: Path, sha: str) -> None:
    write_atomic(_memo(wheel), sha + "\n")


def pip_download(version: str, into: Path, dist: str = PACKAGE) -> Path:
    """``pip download --no-deps DIST==version`` into ``into``; the wheel's path."""
    with progress.task(f"downloading {dist}=={version} from PyPI"):
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-q",
             "--disable-pip-version-check", "-d", str(into), f"{dist}=={version}"],
            capture_output=True, text=True,
        )
    wheels = sorted(into.glob(f"{wheel_prefix(dist)}-*.whl"))
    if proc.returncode != 0 or not wheels:
        if "No matching distribution" in proc.stderr or "Could not find a version" in proc.stderr:
            raise BadInput(f"--source: {dist}=={version} does not exist on PyPI")
        last = (proc.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise BadInput(f"--source: cannot download {dist}=={version}: {' '.join(last.split())[:300]}")
    return wheels[0]


def unpacked_tree(key: str, stamp: str, fill: Callable[[Path], None], what: str) -> Path:
    """``<cache>/trees/KEY`` holding a complete tree, made once: ``fill(tmp)`` writes it into a
    temporary directory renamed into place under the artifact's lock; ``.complete`` (holding
    ``stamp``) marks it finished. A complete tree is never touched again."""
    trees = cache_dir("trees")
    root = trees / key
    if _complete(root, stamp):
        return root
    with artifact_lock(trees / f".{key}.lock", what):
        if _complete(root, stamp):  # another run made it while we waited
            return root
        for stale in trees.glob(f"{TMP_PREFIX}{key}-*"):
            shutil.rmtree(stale, ignore_errors=True)  # a killed run's unpack (we hold the lock)
        tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{key}-", dir=trees))
        try:
            fill(tmp)
            (tmp / COMPLETE).write_text(stamp)
            if os.path.lexists(root):  # an incomplete tree of an older forgepatch: set aside, then gone
                aside = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{key}-old-", dir=trees))
                os.replace(root, aside / "tree")
                shutil.rmtree(aside, ignore_errors=True)
            os.replace(tmp, root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def _complete(root: Path, stamp: str) -> bool:
    try:
        return (root / COMPLETE).read_text().strip() == stamp
    except OSError:
        return False
