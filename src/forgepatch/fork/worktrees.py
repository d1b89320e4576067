"""``fork``'s private worktrees: made for one run, removed after it; what a killed run left
is removed by the next.

A fork builds its commits in a linked worktree under ``<git dir>/forgepatch-worktrees/``
(made ``--no-checkout``: only the files a patch changes are written there). A run killed
there leaves the worktree, its administrative entry ``<git dir>/worktrees/<id>`` (still
``locked`` "initializing", with a HEAD that ``git fsck`` reports as pointing at nothing, when
``git worktree add`` itself was killed) and a commit message file. Only forgepatch makes
worktrees there and only under the repository's forgepatch lock, so whoever holds the lock
removes every one of them before it starts (``prune_leftovers``); ``git worktree prune`` and
``git fsck`` are clean after that.

A ref lock (``refs/heads/....lock``) left by a killed ``git update-ref`` cannot be removed
that safely (a git command of the user's may hold it): ``ref_lock_message`` turns git's error
into one line with the command that removes it.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from forgepatch.arch import ARCHES
from forgepatch.infra.gitrepo import GitError, GitRepo

WORKTREES = "forgepatch-worktrees"
_REF_LOCK = re.compile(r"Unable to create '([^']+\.lock)': File exists")


def base(repo: GitRepo) -> Path:
    return repo.git_dir / WORKTREES


def _ours(repo: GitRepo, path: Path) -> bool:
    root = base(repo).resolve()
    try:
        return root in path.resolve().parents
    except OSError:
        return False


def slug(arch: str, pin: str) -> str:
    """The worktree's directory name (and git's id for it) for one arch and pin."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{arch}-{pin}")


def _initializing(entry: Path) -> bool:
    """Locked by ``git worktree add`` while it sets the entry up (or not locked yet, or the
    lock's text half written: killed in between), not by a user's ``git worktree lock``."""
    try:
        return (entry / "locked").read_text(encoding="utf-8").strip() in ("", "initializing")
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _our_name(name: str) -> bool:
    """An id ``git worktree add`` gave one of our worktrees (``slug()``, maybe numbered)."""
    return any(name.startswith(f"{arch}-") for arch in ARCHES)


def drop(repo: GitRepo, wt: Path) -> None:
    """Remove one worktree of ours and its administrative entry."""
    if wt.exists():
        try:
            repo.run("worktree", "remove", "--force", "--force", str(wt))
        except GitError:
            shutil.rmtree(wt, ignore_errors=True)
    try:
        repo.run("worktree", "prune")
    except GitError:
        pass


def prune_leftovers(repo: GitRepo) -> int:
    """Remove every worktree (and message file) a killed fork left; the caller holds the
    repository's forgepatch lock. Returns how many worktrees were removed."""
    names: set[str] = set()
    admin = repo.git_dir / "worktrees"
    if admin.is_dir():
        for entry in sorted(admin.iterdir()):
            try:
                gitdir = (entry / "gitdir").read_text(encoding="utf-8").strip()
            except OSError:
                gitdir = ""
            if not gitdir:  # `git worktree add` killed before it wrote gitdir (or while)
                if _initializing(entry) and _our_name(entry.name):
                    shutil.rmtree(entry, ignore_errors=True)
                    names.add(entry.name)
                continue
            checkout = Path(gitdir).parent
            if _ours(repo, checkout):
                shutil.rmtree(checkout, ignore_errors=True)
                shutil.rmtree(entry, ignore_errors=True)  # with its "locked" file and bad HEAD
                names.add(checkout.name)
    root = base(repo)
    if root.is_dir():
        for leftover in sorted(root.iterdir()):
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
                names.add(leftover.name)
            else:
                leftover.unlink(missing_ok=True)
        try:
            root.rmdir()
        except OSError:
            pass
    try:
        repo.run("worktree", "prune")
    except GitError:
        pass
    return len(names)


def ref_lock_message(repo: GitRepo, error: GitError) -> str | None:
    """One line for a git error caused by a leftover ``*.lock`` file, with the fix."""
    m = _REF_LOCK.search(f"{error}\n{getattr(error, 'stderr', '')}")
    if not m:
        return None
    path = m.group(1)
    return (f"{path} was left by an interrupted git command; if no git command is running in "
            f"{repo.root}, remove it and run again: rm {shlex.quote(path)}")
