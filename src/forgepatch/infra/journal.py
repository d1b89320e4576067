"""Crash-safe multi-file writes: a lock per target tree and a write-ahead journal.

A tree forgepatch writes several files into (a package patched ``--in-place``, a report
directory) gets a state directory ``<root>/.forgepatch/`` for the length of a run:

``lock``
    ``fcntl.flock``-ed: exclusive by a writer, shared by a reader. A run waits up to
    ``FORGEPATCH_LOCK_TIMEOUT`` seconds (default 30) for it, then fails with one line naming
    the holder's pid.
``staged/N``
    the new content of each file, written and fsync-ed first.
``journal.json``
    written (fsync-ed, then renamed into place: the commit point) before the first rename
    of a staged file over its target; it lists every file with the sha256 of its old and
    new content and where its staged copy is (a file to remove has no new content and no
    staged copy: ``apply --reverse`` removes what an apply added), and the directories to
    remove once empty. Removed last, after every rename and removal.

A run killed before the journal exists changed nothing: the next one removes the staged
copies (rolled back). A run killed after it rolls forward: the next one renames the staged
copies still there, checking each target still holds its old or new content. Either way it
says so in one line on stderr, and the state directory is gone when that run ends, so no
temp file outlives a run that ends. Recovery is idempotent: a crash during it is recovered
by the next run.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from forgepatch import envsettings
from forgepatch.infra.atomic import uninterrupted, write_atomic
from forgepatch.errors import BadInput, Failure
from forgepatch.paths import cache_dir

STATE_DIR = ".forgepatch"
LOCK = "lock"
JOURNAL = "journal.json"
STAGED = "staged"
FORMAT = "forgepatch-journal/1"
DEFAULT_TIMEOUT = 30.0


def notify(message: str) -> None:
    """The one line a recovery prints (stderr: ``--json`` keeps stdout one document)."""
    print(f"forgepatch: {message}", file=sys.stderr, flush=True)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def lock_timeout(default: float | None = None) -> float:
    """``$FORGEPATCH_LOCK_TIMEOUT`` (checked once, the same way for every command:
    ``envsettings.LOCK_TIMEOUT``), else ``default`` (else the setting's own default)."""
    setting = envsettings.LOCK_TIMEOUT
    if default is not None:
        from dataclasses import replace

        setting = replace(setting, default=default)
    return setting.read()


WAIT_NOTICE_AFTER = 1.0  # seconds a lock is waited for before saying so (once)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes, mode: int = 0o644) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the lock ----------------------------------------------------------------------------
class TreeLock:
    """``<root>/.forgepatch/lock`` held with ``flock``. The lock file is removed by the last
    holder (a waiter that then gets a removed file sees that and takes the new one)."""

    def __init__(self, root: Path, what: str) -> None:
        self.root = Path(root)
        self.state = self.root / STATE_DIR
        self.path = self.state / LOCK
        self.what = what
        self.fd: int | None = None
        self.exclusive = False

    def _open(self) -> int:
        made = False
        try:
            self.state.mkdir()
            made = True
        except FileExistsError:
            pass
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            if made:  # e.g. a full disk: no empty state directory left behind
                try:
                    self.state.rmdir()
                except OSError:
                    pass
            raise

    def _same_file(self, fd: int) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        own = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)

    def holder(self) -> str:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            text = ""
        return text or "a forgepatch run reading it"

    def acquire(self, exclusive: bool, timeout: float | None = None) -> None:
        timeout = lock_timeout() if timeout is None else timeout
        start = time.monotonic()
        deadline = start + timeout
        told = False
        op = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        while True:
            try:
                fd = self._open()
            except FileNotFoundError:
                continue  # the last holder removed the directory between our mkdir and open
            except OSError as exc:
                raise BadInput(f"{self.root}: cannot lock for {self.what}: {exc.strerror}") from None
            while True:
                try:
                    fcntl.flock(fd, op)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        os.close(fd)
                        raise
                if time.monotonic() >= deadline:
                    holder = self.holder()
                    os.close(fd)
                    raise Failure(f"{self.root} is locked by {holder}; waited {timeout:g} s "
                                  f"(FORGEPATCH_LOCK_TIMEOUT) for {self.what}; try again when it has finished")
                if not told and time.monotonic() - start >= WAIT_NOTICE_AFTER:
                    told = True
                    notify(f"{self.root} is locked by {self.holder()}; waiting up to {timeout:g} s "
                           f"(FORGEPATCH_LOCK_TIMEOUT) for {self.what}")
                time.sleep(0.05)
            if self._same_file(fd):
                break
            os.close(fd)  # the previous holder removed the file while we waited: take the new one
        self.fd, self.exclusive = fd, exclusive
        if exclusive:
            try:
                os.ftruncate(fd, 0)
                os.write(fd, f"pid {os.getpid()} ({self.what})\n".encode())
            except OSError:
                pass  # a full disk: the holder's name is a courtesy, the flock is the lock

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        if self.exclusive:
            self._remove_state()
            os.close(fd)
            return
        os.close(fd)
        # a reader removes the lock file only when nobody else holds it
        try:
            fd = os.open(self.path, os.O_RDWR)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return
        if self._same_file(fd) and not _pending(self.state):
            self._remove_state()
        os.close(fd)

    def _remove_state(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        try:
            self.state.rmdir()
        except OSError:
            pass  # not empty: a journal this run could not complete stays for the next one


def lock_file_for(path: Path) -> Path:
    """Where the lock of a shared file lives: the user cache dir, keyed by the file's
    resolved path (never beside the file: a ledger directory is committed to git)."""
    key = sha256(str(Path(path).resolve()).encode())[:32]
    return cache_dir("locks") / f"{key}.lock"


def flock_waiting(fd: int, timeout: float, *, waiting: Callable[[], None], gave_up: Callable[[], Exception],
                  notice_after: float = WAIT_NOTICE_AFTER, poll: float = 0.05) -> None:
    """Take an exclusive flock on ``fd``, polling: ``waiting()`` once the wait passes
    ``notice_after`` seconds, ``gave_up()`` raised past ``timeout``."""
    start, told = time.monotonic(), False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        waited = time.monotonic() - start
        if waited >= timeout:
            raise gave_up()
        if not told and waited >= notice_after:
            told = True
            waiting()
        time.sleep(poll)


@contextmanager
def path_lock(path: Path, what: str, timeout: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on the shared file ``path`` for a read-modify-write (the
    ledger): concurrent runs wait their turn (saying so after a second), up to
    ``FORGEPATCH_LOCK_TIMEOUT`` seconds, then fail with one line naming the holder."""
    timeout = lock_timeout() if timeout is None else timeout
    lock_path = lock_file_for(path)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise BadInput(f"{path}: cannot lock for {what} ({lock_path}: {exc.strerror})") from None

    def holder() -> str:
        try:
            return lock_path.read_text(encoding="utf-8", errors="replace").strip() or "another forgepatch run"
        except OSError:
            return "another forgepatch run"

    try:
        flock_waiting(
            fd, timeout,
            waiting=lambda: notify(f"{path} is locked by {holder()}; waiting up to {timeout:g} s "
                                   f"(FORGEPATCH_LOCK_TIMEOUT) for {what}"),
            gave_up=lambda: Failure(f"{path} is locked by {holder()}; waited {timeout:g} s "
                                    f"(FORGEPATCH_LOCK_TIMEOUT) for {what}; try again when it has finished"))
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} ({what})\n".encode())
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # the lock file stays (in the cache): removing it would race a waiter


def _stale(state: Path) -> bool:
    """A state directory nobody holds: what a run killed (or interrupted) while it took or
    held the lock left, with nothing to recover in it (an empty directory, a lock file)."""
    if not state.is_dir():
        return False
    try:
        fd = os.open(state / LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except OSError:
        return False  # held: a live run's, it removes it itself
    finally:
        os.close(fd)


def _pending(state: Path) -> bool:
    """Anything of an interrupted transaction (staged copies, a journal) under ``state``."""
    try:
        return any(p.name != LOCK for p in state.iterdir())
    except OSError:
        return False


# -- the journal -------------------------------------------------------------------------
@dataclass
class Entry:
    path: str  # relative to the root, POSIX
    old: str | None  # sha256 of the content replaced (None: a new file)
    new: str | None  # sha256 of the new content (None: the file is removed)
    staged: str | None  # relative to the state directory (None: a removal)
    mode: int

    def to_json(self) -> dict:
        return {"path": self.path, "old": self.old, "new": self.new, "staged": self.staged, "mode": self.mode}


def _beside(target: Path) -> Path:
    return target.with_name(f".{target.name}.forgepatch-move")


def _move(staged: Path, target: Path) -> None:
    """Rename a staged copy over its target; across file systems (EXDEV: a report on another
    mount than the state directory) copy it beside the target first, then rename."""
    try:
        os.replace(staged, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        tmp = _beside(target)
        _write_synced(tmp, staged.read_bytes(), staged.stat().st_mode & 0o7777)
        os.replace(tmp, target)
        staged.unlink()


def _digest(path: Path) -> str | None:
    try:
        return sha256(path.read_bytes())
    except FileNotFoundError:
        return None


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _target(root: Path, rel: str) -> Path:
    target = (root / rel)
    if os.path.isabs(rel) or ".." in Path(rel).parts:
        raise BadInput(f"{root}: journal path {rel!r} leaves the tree")
    return target


def recover(root: Path) -> str | None:
    """Finish or undo an interrupted transaction under ``root`` (the caller holds the
    exclusive lock). Returns the one-line notice, or None when there was nothing to do."""
    root = Path(root)
    state = root / STATE_DIR
    journal = state / JOURNAL
    if not state.is_dir():
        return None
    if journal.is_file():
        try:
            doc = json.loads(journal.read_text(encoding="utf-8"))
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}")
            entries = [Entry(**e) for e in doc["files"]]
        except (ValueError, TypeError, KeyError) as exc:
            raise BadInput(f"{journal}: unreadable journal of an interrupted run ({exc}); "
                           f"inspect it, then remove {state}") from None
        todo = []
        for e in entries:
            target = _target(root, e.path)
            have = _digest(target)
            if have == e.new:
                continue
            if e.new is None and have == e.old:
                todo.append((None, target))  # a removal still to do
                continue
            staged = state / (e.staged or "")
            if e.new is not None and have == e.old and _digest(staged) == e.new:
                todo.append((staged, target))
            else:
                raise BadInput(f"{target}: changed since an interrupted {doc.get('what', 'write')} "
                               f"(pid {doc.get('pid')}); the journal {journal} cannot be completed: "
                               f"inspect the tree, then remove {state}")
        for staged, target in todo:
            if staged is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            _move(staged, target)
        for e in entries:  # a copy a killed cross-device move left beside its target
            target = _target(root, e.path)
            if target.parent.is_dir():
                _beside(target).unlink(missing_ok=True)
        for parent in {t.parent for _, t in todo}:
            if parent.is_dir():
                _fsync_dir(parent)
        _remove_empty(root, doc.get("rmdirs", []))
        shutil.rmtree(state / STAGED, ignore_errors=True)  # before the journal: see commit()
        journal.unlink()
        _fsync_dir(state)
        return (f"{root}: completed an interrupted {doc.get('what', 'write')} (pid {doc.get('pid')}): "
                f"{len(todo)} of {len(entries)} file(s) were still to write; now all are")
    leftovers = [p for p in state.iterdir() if p.name != LOCK]
    if not leftovers:
        return None
    for p in leftovers:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return f"{root}: rolled back an interrupted forgepatch write (it had not committed; no file had been changed)"


FS_IOC_GETFLAGS = 0x80086601  # linux/fs.h: the inode flags chattr sets
FS_IMMUTABLE_FL, FS_APPEND_FL = 0x10, 0x20
SPACE_MARGIN_BLOCKS = 4  # the journal itself, directory blocks


def _inode_flags(path: Path) -> int:
    import array
    import fcntl as _fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return 0
    try:
        buf = array.array("l", [0])
        _fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf, True)
        return buf[0]
    except OSError:  # a file system without inode flags
        return 0
    finally:
        os.close(fd)


def _unwritable_dir(directory: Path) -> str | None:
    """Why no file can be created, renamed or removed in ``directory`` (None: it can)."""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "on a read-only file system"
    except OSError as exc:
        return exc.strerror
    if _inode_flags(directory) & (FS_IMMUTABLE_FL | FS_APPEND_FL):
        return "its directory is immutable or append-only (chattr)"
    if not os.access(directory, os.W_OK | os.X_OK):
        return "its directory is not writable (permissions)"
    return None


def unreplaceable(target: Path, mounts: set[str] | None = None) -> str | None:
    """Why ``target`` (maybe not there yet) cannot be replaced by a rename; None: it can."""
    target = Path(target)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return exc.strerror
    if st is not None:
        import stat

        if stat.S_ISDIR(st.st_mode):
            return "it is a directory"
        if _inode_flags(target) & (FS_IMMUTABLE_FL | FS_APPEND_FL):
            return "it is immutable or append-only (chattr +i/+a)"
        try:
            if os.stat(target.parent).st_dev != st.st_dev or str(target.resolve()) in (_mount_points() if mounts is None else mounts):
                return "it is a mount point (bind-mounted): a rename cannot replace it"
        except OSError as exc:
            return exc.strerror
    parent = target.parent
    while not parent.exists():  # made on the way: the nearest existing directory decides
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a directory"
    return _unwritable_dir(parent)


def _mount_points() -> set[str]:
    """Every mount point of this process's mount namespace (a file bind-mounted onto itself
    keeps its device number: only the mount table shows it)."""
    try:
        text = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    out = set()
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:  # field 5: the mount point, with space, tab, newline, \\ octal-escaped
            out.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return out


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def preflight(root: Path, files: dict[str, bytes]) -> None:
    """Before anything is written: every target can be replaced, and the state directory's
    (and each other file system's) free space holds the staged copies. BadInput naming the
    first file that cannot, and why; nothing has been changed then."""
    root = Path(root)
    mounts = _mount_points()
    for rel in sorted(files):
        why = unreplaceable(_target(root, rel), mounts)
        if why:
            raise BadInput(f"{_target(root, rel)}: cannot be replaced: {why}; nothing changed")
    need: dict[int, int] = {}
    where: dict[int, Path] = {}

    def add(directory: Path, size: int) -> None:
        dev = os.stat(directory).st_dev
        if dev not in need:
            where[dev] = directory
            need[dev] = SPACE_MARGIN_BLOCKS * _block(directory)
        block = _block(where[dev])
        need[dev] += -(-size // block) * block  # whole blocks: a small file takes one

    add(root, 0)
    for rel, data in files.items():
        parent = _target(root, rel).parent
        while not parent.exists():
            parent = parent.parent
        add(root, len(data))  # the staged copy
        if os.stat(parent).st_dev != os.stat(root).st_dev:
            add(parent, len(data))  # moved across file systems: a copy beside the target too
    for dev, size in need.items():
        try:
            free = _free(where[dev])
        except OSError:
            continue
        if free < size:
            raise BadInput(f"{where[dev]}: not enough free space to stage the new files "
                           f"({-(-size // 1024)} KiB needed, {free // 1024} KiB free); nothing changed")


def _block(path: Path) -> int:
    try:
        return os.statvfs(path).f_frsize or 4096
    except OSError:
        return 4096


def _what_failed(exc: OSError, root: Path) -> str:
    name = exc.filename if exc.filename is not None else root
    return f"{name}: {exc.strerror or exc}"


def commit(root: Path, files: dict[str, bytes], what: str, remove: dict[str, str] | None = None,
           rmdirs: list[str] | None = None) -> None:
    """Replace ``files`` (paths relative to ``root``) all or none, surviving a crash or an
    interrupt at any point (see the module docstring). The caller holds ``root``'s
    exclusive lock. Directories a new file needs are made after the commit point, so a
    rolled-back write leaves none behind. ``remove`` (path -> sha256 of the content it must
    hold) lists files removed in the same transaction, and ``rmdirs`` directories removed
    after it when they are empty (deepest first)."""
    remove = dict(remove or {})
    if not files and not remove:
        return  # nothing to replace (an already patched tree)
    root = Path(root)
    preflight(root, {**files, **{rel: b"" for rel in remove}})
    state = root / STATE_DIR
    staging = state / STAGED
    entries: list[Entry] = []
    tmp = state / (JOURNAL + ".tmp")
    try:
        staging.mkdir(parents=True, exist_ok=True)
        for n, (rel, data) in enumerate(sorted(files.items())):
            target = _target(root, rel)
            try:
                mode = target.stat().st_mode & 0o7777
                old = sha256(target.read_bytes())
            except FileNotFoundError:
                mode, old = _default_mode(), None
            name = f"{STAGED}/{n}"
            _write_synced(state / name, data, mode)
            entries.append(Entry(rel, old, sha256(data), name, mode))
        for rel, old in sorted(remove.items()):
            _target(root, rel)
            entries.append(Entry(rel, old, None, None, 0))
        _fsync_dir(staging)
        doc = {"format": FORMAT, "what": what, "pid": os.getpid(), "root": str(root),
               "files": [e.to_json() for e in entries], "rmdirs": sorted(rmdirs or [], key=_depth_first)}
        _write_synced(tmp, json.dumps(doc, indent=1).encode())
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        tmp.unlink(missing_ok=True)
        raise BadInput(f"cannot write {what}: {_what_failed(exc, root)}; nothing changed") from None
    with uninterrupted():  # Ctrl-C now waits for the renames: the run ends finished
        os.replace(tmp, state / JOURNAL)  # the commit point
        _fsync_dir(state)
        try:
            for e in entries:
                target = _target(root, e.path)
                if e.staged is None:
                    target.unlink(missing_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                _move(state / e.staged, target)
            for parent in {_target(root, e.path).parent for e in entries}:
                if parent.is_dir():
                    _fsync_dir(parent)
            _remove_empty(root, doc["rmdirs"])
        except OSError as exc:  # e.g. a target directory turned read-only: finish on the next run
            raise BadInput(f"cannot write {what}: {_what_failed(exc, root)}; the journal in {state} "
                           f"completes it on the next forgepatch run") from None
        # the (now empty) staging directory goes before the journal: a run killed between the
        # two leaves a journal (rolled forward: nothing left to do), never a staging directory
        # without one (which would read as "nothing was changed")
        shutil.rmtree(staging, ignore_errors=True)
        (state / JOURNAL).unlink()
        _fsync_dir(state)


def _depth_first(rel: str) -> tuple[int, str]:
    return (-len(Path(rel).parts), rel)


def _remove_empty(root: Path, rmdirs: list[str]) -> None:
    """Remove each directory of ``rmdirs`` (relative to ``root``, deepest first) that is
    empty; one that holds anything (a file made since) stays. Idempotent."""
    for rel in sorted(rmdirs, key=_depth_first):
        target = _target(root, rel)
        try:
            target.rmdir()
        except OSError:
            continue
        _fsync_dir(target.parent)


# -- what commands use -------------------------------------------------------------------
@contextmanager
def open_tree(root: Path, what: str, write: bool) -> Iterator[TreeLock | None]:
    """Hold ``root``'s lock (exclusive to ``write``, shared to read) after completing any
    interrupted transaction there. A reader of a tree it cannot write to (no state
    directory can be made) reads it unlocked: nothing of ours can be half-written there."""
    root = Path(root)
    lock = TreeLock(root, what)
    state = root / STATE_DIR
    lock_timeout()  # a bad $FORGEPATCH_LOCK_TIMEOUT is bad input for readers too, not "unlocked"
    while True:
        exclusive = write or _pending(state)
        try:
            lock.acquire(exclusive=exclusive)
        except BadInput:
            if exclusive:
                raise
            yield None
            return
        if exclusive:
            try:
                message = recover(root)
            except BaseException:
                lock.release()
                raise
            if message:
                notify(message)
                _notices[str(root.resolve())] = message
            if write:
                break
            lock.release()  # recovered; read on under a shared lock
            continue
        if not _pending(state):
            break
        lock.release()  # a writer was killed between our look and our lock: recover first
    try:
        yield lock
    finally:
        lock.release()


_notices: dict[str, str] = {}


def last_notice(root: Path) -> str | None:
    """The recovery notice this process printed for ``root`` (None: it recovered nothing)."""
    return _notices.get(str(Path(root).resolve()))


def write_files(root: Path, files: dict[str, bytes], what: str) -> None:
    """Lock ``root``, recover it if needed, and commit ``files`` (paths relative to it)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with open_tree(root, what, write=True):
        commit(root, files, what)


def recover_tree(root: Path) -> None:
    """Complete (or undo) an interrupted transaction under ``root``, if one is there: every
    command that reads a local tree calls this first."""
    state = Path(root) / STATE_DIR
    if _pending(state) or _stale(state):
        with open_tree(root, "recovery", write=True):
            pass  # the exclusive holder removes the state directory when it lets go


def write_together(files: dict[Path, bytes | str], what: str) -> None:
    """Write several files (reports, results) all or none, like ``write_files``: the
    journal lives in their common directory. One file is a plain atomic write."""
    items = {Path(p).resolve(): (d.encode("utf-8") if isinstance(d, str) else d) for p, d in files.items()}
    for path in items:
        path.parent.mkdir(parents=True, exist_ok=True)
    root = Path(os.path.commonpath([str(p.parent) for p in items]))
    if len(items) == 1 or not os.access(root, os.W_OK):
        # one file, or files sharing no directory we may write to: each one atomic on its own
        for path, data in items.items():
            write_atomic(path, data)
        return
    write_files(root, {str(p.relative_to(root)): d for p, d in items.items()}, what)
