"""The git layer, on GitPython: revisions, package trees read straight from git objects (never
checked out), refs, tags, commit messages, the per-repo run lock.

Nothing here touches the user's branch, index or working files. Blobs come through GitPython's
persistent ``git cat-file --batch`` process; tree listings through ``git ls-tree``. GitPython
is imported lazily (``forgepatch --help`` stays fast).
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from forgepatch.errors import BadInput, Failure
from forgepatch.infra.journal import notify

LOCK_NAME = "forgepatch.lock"
# a top-level literal only (newer version.py files hold an indented "0.0.0.dev0" fallback)
_VERSION_RE = re.compile(rb"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.M)
_TAG_RE = re.compile(r"v?(\d+(?:\.\d+)*)")
FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "forgepatch",
    "GIT_AUTHOR_EMAIL": "forgepatch@localhost",
    "GIT_COMMITTER_NAME": "forgepatch",
    "GIT_COMMITTER_EMAIL": "forgepatch@localhost",
}


def _git_errors():
    from git.exc import GitCommandError

    return GitCommandError


class GitError(Exception):
    """A git command failed (``str()`` is git's last error line, ``stderr`` all of it)."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


@dataclass
class GitTree:
    """The SGLang package at one commit, read from git objects (implements ``Tree``).

    Paths are the ``.py`` files, relative to the package root (``srt/layers/communicator.py``);
    ``key()`` is the blob id, so per-file results can be memoised across revisions. An
    upstream revision is ``pristine`` (unpatched): gates that already accept the arch there
    were absorbed upstream."""

    repo: "GitRepo"
    commit: str
    package_dir: str
    tree_id: str
    blobs: dict[str, str] = field(default_factory=dict)  # rel path -> blob id (all files)
    _prefetched: dict[str, bytes] = field(default_factory=dict, repr=False)
    pristine: bool = True

    def paths(self) -> list[str]:
        return [rel for rel in self.blobs if rel.endswith(".py")]

    def read(self, rel: str) -> bytes:
        if rel in self._prefetched:
            return self._prefetched[rel]
        return self.repo.blob(self.blobs[rel])

    def all_paths(self) -> list[str]:
        """Every file of the package at this commit, not only ``.py`` (text patches and added
        files read them: ``patching.fulltree``)."""
        return sorted(self.blobs)

    def read_any(self, rel: str) -> bytes | None:
        """The bytes of any file of the package, or None when the commit has no such file."""
        return self.read(rel) if rel in self.blobs else None

    def prefetch(self, rels: list[str]) -> None:
        """Read these files' blobs ahead of a scan (the engine asks before it starts)."""
        todo = [rel for rel in rels if rel not in self._prefetched]
        if todo:
            self._prefetched.update(zip(todo, self.repo.blobs([self.blobs[r] for r in todo])))

    def key(self, rel: str) -> str | None:
        return self.blobs.get(rel)

    def display(self, rel: str) -> str:
        return f"{self.package_dir}/{rel}"

    def version(self) -> str | None:
        """The upstream version of this commit: a literal ``__version__`` in
        ``_version.py``/``version.py`` if tracked, else derived from the nearest release tag
        the way setuptools-scm does (``v0.5.20`` + 3 commits -> ``0.5.21.dev3``)."""
        for name in ("_version.py", "version.py"):
            oid = self.blobs.get(name)
            if oid is not None and (m := _VERSION_RE.search(self.repo.blob(oid))):
                return m.group(1).decode()
        return self.repo.version_from_tags(self.commit)


@dataclass
class TagFacts:
    name: str
    object: str  # the tag object (annotated) or the commit (lightweight)
    commit: str
    annotated: bool
    message: str = ""  # without the signature block
    trailers: dict[str, str] = field(default_factory=dict)
    signature: str = ""  # "gpg" | "ssh" | "x509" when the tag object is signed, else ""


_SIGNATURES = (("-----BEGIN PGP SIGNATURE-----", "gpg"), ("-----BEGIN SSH SIGNATURE-----", "ssh"),
               ("-----BEGIN SIGNED MESSAGE-----", "x509"))


def split_signature(message: str) -> tuple[str, str]:
    """(message without its signature block, signature kind or "")."""
    for marker, kind in _SIGNATURES:
        at = message.find(marker)
        if at >= 0:
            return message[:at], kind
    return message, ""


STALE_REF_LOCK_S = 2.0  # a ref lock older than this is a killed git's (git waits 100 ms for one)


class GitRepo:
    """A git repository (``--repo``, or a source's clone), validated on construction."""

    def __init__(self, path: Path, flag: str = "--repo"):
        from git import Repo
        from git.exc import InvalidGitRepositoryError, NoSuchPathError

        path = Path(path)
        if not path.is_dir():
            raise BadInput(f"{flag}: {path} is not a directory")
        try:
            self.repo = Repo(path, search_parent_directories=True)
        except (InvalidGitRepositoryError, NoSuchPathError):
            raise BadInput(f"{flag}: {path} is not a git repository") from None
        self.root = Path(self.repo.working_tree_dir or self.repo.git_dir)
        self.git_dir = Path(self.repo.common_dir).resolve()
        self._batch: Any = None  # the cat-file --batch process of blobs()

    # -- commands --------------------------------------------------------------------------
    def run(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
        """``git ARGS`` (in ``cwd``, default the repository), stdout without the final
        newline; GitError with git's last error line."""
        from git import Git

        runner = Git(str(cwd)) if cwd is not None else self.repo.git
        try:
            return runner.execute(["git", *args], env=env, strip_newline_in_stdout=True)
        except _git_errors() as exc:
            stderr = str(exc.stderr or "").strip().strip("'").strip()
            last = stderr.splitlines()[-1].removeprefix("stderr: ").strip("' ") if stderr else "failed"
            raise GitError(f"git {' '.join(args)}: {last}", stderr) from None

    # -- revisions and refs ----------------------------------------------------------------
    def resolve(self, rev: str, flag: str = "--rev") -> str:
        """Full commit SHA of ``rev``; BadInput naming ``flag`` (the option the user gave it
        with) if the repository has no such commit."""
        if not rev or rev.startswith("-"):
            raise BadInput(f"{flag}: invalid revision {rev!r}")
        try:
            return self.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
        except GitError:
            raise BadInput(f"{flag}: unknown revision {rev!r} in {self.root}") from None

    def ref(self, name: str) -> str | None:
        """The commit ``name`` (a full ref or any revision) points at, None if none."""
        try:
            return self.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}")
        except GitError:
            return None

    def branch_ref(self, name: str) -> str | None:
        """The ref a fork branch ``name`` is read from: ``refs/heads/NAME``, else the
        remote-tracking ``refs/remotes/origin/NAME`` (a CI checkout has only those), else the
        one remote that has it; None when none has it, or several remotes other than origin
        do (which one is meant cannot be decided)."""
        if self.ref(f"refs/heads/{name}") is not None:
            return f"refs/heads/{name}"
        if self.ref(f"refs/remotes/origin/{name}") is not None:
            return f"refs/remotes/origin/{name}"
        try:
            out = self.run("for-each-ref", "--format=%(refname)", "refs/remotes/")
        except GitError:
            return None
        found = [r for r in out.splitlines() if r.count("/") >= 3 and r.split("/", 3)[3] == name]
        return found[0] if len(found) == 1 else None

    def is_tag(self, name: str) -> bool:
        try:
            self.run("show-ref", "--verify", "--quiet", f"refs/tags/{name}")
            return True
        except GitError:
            return False

    def valid_ref(self, ref: str) -> bool:
        """``git check-ref-format``: can ``ref`` (``refs/heads/...``) be created?"""
        try:
            self.run("check-ref-format", ref)
            return True
        except GitError:
            return False

    def message(self, sha: str) -> str:
        return self.repo.commit(sha).message

    def first_parent(self, since: str, until: str = "HEAD") -> list[str]:
        """Commits from ``since`` to ``until`` inclusive along first parents, oldest first."""
        start, end = self.resolve(since, "--since"), self.resolve(until, "--until")
        chain = [start] + [c.hexsha for c in self.repo.iter_commits(f"{start}..{end}", first_parent=True, reverse=True)]
        if start != end and len(chain) == 1:
            raise BadInput(f"--since: {since!r} is not an ancestor of {until!r} along first parents")
        return chain

    def describe(self, sha: str) -> str:
        """A short human label: the tag pointing at ``sha`` if any, else the short SHA."""
        try:
            tags = self.run("tag", "--points-at", sha)
        except GitError:
            tags = ""
        names = sorted(t for t in tags.splitlines() if t)
        return names[0] if names else sha[:12]

    def version_from_tags(self, sha: str) -> str | None:
        try:
            described = self.run("describe", "--tags", "--long", "--match", "v[0-9]*", sha)
        except GitError:
            return None
        tag, distance, _ = described.rsplit("-", 2)
        m = _TAG_RE.fullmatch(tag)
        if not m:
            return None
        if distance == "0":
            return m.group(1)
        parts = m.group(1).split(".")
        parts[-1] = str(int(parts[-1]) + 1)
        return ".".join(parts) + f".dev{distance}"

    # -- tags --------------------------------------------------------------------------------
    def tag(self, name: str) -> TagFacts | None:
        from git import TagReference

        ref = TagReference(self.repo, f"refs/tags/{name}")
        if not ref.is_valid():
            return None
        obj = ref.object
        commit = ref.commit.hexsha
        if obj.type != "tag":
            return TagFacts(name, obj.hexsha, commit, False)
        message, signature = split_signature(obj.message)
        return TagFacts(name, obj.hexsha, commit, True, message, parse_trailers(message), signature)

    def tag_names(self, pattern: str = "") -> list[str]:
        """Every tag name (under ``refs/tags/<pattern>`` when given)."""
        try:
            out = self.run("for-each-ref", "--format=%(refname:strip=2)", f"refs/tags/{pattern}".rstrip("/"))
        except GitError:
            return []
        return [line for line in out.splitlines() if line]

    def signing(self) -> str | None:
        """How the user's git signs tags: the ``gpg.format`` (``openpgp``, ``ssh``, ``x509``)
        when ``user.signingkey`` is set or ``tag.gpgSign`` is true, else None."""
        reader = self.repo.config_reader()
        key = reader.get_value("user", "signingkey", "")
        wanted = str(reader.get_value("tag", "gpgsign", "false")).lower() in ("true", "yes", "on", "1")
        if not key and not wanted:
            return None
        return str(reader.get_value("gpg", "format", "openpgp")) or "openpgp"

    def verify_tag(self, name: str) -> str | None:
        """``git verify-tag``: None when the signature verifies, else git's reason."""
        try:
            self.run("verify-tag", "--", name)
            return None
        except GitError as exc:
            return str(exc).split(": ", 1)[-1] or "the signature does not verify"

    def create_tag(self, name: str, commit: str, message: str) -> TagFacts | None:
        """An annotated tag, signed when the user's git is configured to sign
        (``user.signingkey`` or ``tag.gpgSign``; gpg, ssh or x509 format); None when the name
        exists already."""
        import tempfile

        stale = self.clear_stale_ref_lock(f"refs/tags/{name}")
        if stale:
            notify(stale)
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".msg", delete=False) as fh:
            fh.write(message)
        signing = self.signing()
        args = ["tag", "-s"] if signing else ["-c", "tag.gpgSign=false", "tag", "-a"]
        try:
            self.run(*args, "--cleanup=verbatim", "-F", fh.name, "--", name, commit, env=self.identity_env())
        except GitError as exc:
            if "already exists" in str(exc):
                return None
            if signing:
                raise Failure(f"git tag {name}: signing failed ({signing} format, user.signingkey): {exc}") from None
            raise Failure(f"git tag {name}: {exc}") from None
        finally:
            os.unlink(fh.name)
        return self.tag(name)

    def clear_stale_ref_lock(self, ref: str) -> str | None:
        """Remove ``<ref>.lock`` when a git killed between making it and renaming it over the
        ref left it: it blocks every later update of the ref ("remove the file manually to
        continue"). Git holds a ref lock for milliseconds and waits 100 ms for one itself
        (core.filesRefLockTimeout): one still there after ``STALE_REF_LOCK_S`` is a dead
        git's. Returns the line saying it was removed, or None."""
        import time

        lock = self.git_dir / f"{ref}.lock"
        deadline = time.monotonic() + STALE_REF_LOCK_S
        while lock.is_file():
            if time.monotonic() >= deadline:
                lock.unlink(missing_ok=True)
                return (f"{lock}: removed the lock file a git killed while updating {ref} left "
                        f"(no git held it for {STALE_REF_LOCK_S:g} s)")
            time.sleep(0.05)
        return None

    def delete_ref(self, ref: str, expected: str) -> None:
        """Delete ``ref`` only if it still points at ``expected`` (compare-and-delete)."""
        try:
            self.run("update-ref", "-d", ref, expected)
        except GitError:
            pass

    def identity_env(self) -> dict[str, str]:
        """The user's git identity when configured, else a fixed forgepatch identity."""
        reader = self.repo.config_reader()
        if reader.get_value("user", "email", "") and reader.get_value("user", "name", ""):
            return {}
        return dict(FALLBACK_IDENTITY)

    # -- trees and blobs ---------------------------------------------------------------------
    def tree(self, commit: str, package_dir: str = "python/sglang") -> GitTree:
        """The package at ``commit`` (BadInput if the commit has no SGLang package there)."""
        package_dir = package_dir.strip("/")
        try:
            tree_id = self.run("rev-parse", "--verify", "--quiet", f"{commit}:{package_dir}")
            listing = self.run("ls-tree", "-r", "-z", "--full-tree", commit, "--", f"{package_dir}/")
        except GitError:
            tree_id, listing = "", ""
        prefix = package_dir + "/"
        blobs: dict[str, str] = {}
        for entry in listing.split("\0"):
            if not entry:
                continue
            meta, path = entry.split("\t", 1)
            mode, kind, oid = meta.split()
            if kind == "blob" and mode != "120000":
                blobs[path[len(prefix):]] = oid
        if not tree_id or "__init__.py" not in blobs:
            raise BadInput(f"--repo: no SGLang package at {package_dir}/ in {self.root} at {commit[:12]}")
        return GitTree(self, commit, package_dir, tree_id, blobs)

    def blob(self, oid: str) -> bytes:
        return self.blobs([oid])[0]

    def blobs(self, oids: list[str]) -> list[bytes]:
        """Many blobs in one pipelined exchange with a ``git cat-file --batch`` process that
        GitPython started: a thread feeds the ids while this one reads (no round trip per
        blob, and no pipe deadlock)."""
        import subprocess
        import threading

        if self._batch is None:
            self._batch = self.repo.git.execute(["git", "cat-file", "--batch"], as_process=True,
                                                istream=subprocess.PIPE)
        stdin, stdout = self._batch.proc.stdin, self._batch.proc.stdout

        def feed() -> None:
            stdin.write(b"".join(oid.encode() + b"\n" for oid in oids))
            stdin.flush()

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        out = []
        for oid in oids:
            header = stdout.readline().split()
            if len(header) != 3:
                raise Failure(f"git cat-file: object {oid} is missing")
            out.append(stdout.read(int(header[2]) + 1)[:-1])
        feeder.join()
        return out

    def close(self) -> None:
        if self._batch is not None:
            self._batch.proc.stdin.close()
            self._batch.proc.wait()
            self._batch = None
        self.repo.close()

    def __enter__(self) -> "GitRepo":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the run lock ----------------------------------------------------------------------
    @contextmanager
    def lock(self) -> Iterator[Path]:
        """Hold ``<git dir>/forgepatch.lock`` for the duration; fail at once if taken."""
        from filelock import FileLock, Timeout

        path = self.git_dir / LOCK_NAME
        lock = FileLock(str(path), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise Failure(
                f"another forgepatch run holds the lock on {self.root} ({path}); wait for it to finish"
            ) from None
        try:
            yield path
        finally:
            lock.release()


def clone_bare(url: str, dest: Path) -> None:
    """A bare clone of ``url`` into ``dest`` (BadInput with git's reason)."""
    from git import Repo

    try:
        Repo.clone_from(url, str(dest), bare=True, multi_options=["--quiet"])
    except _git_errors() as exc:
        last = (str(exc.stderr or "").strip().splitlines() or ["failed"])[-1].strip("' ")
        raise BadInput(f"--source: cannot clone {url}: {last}") from None


def parse_trailers(message: str) -> dict[str, str]:
    """``Key: value`` trailers of the last paragraph of a commit or tag message."""
    paragraphs = [p for p in message.strip().split("\n\n") if p.strip()]
    if not paragraphs:
        return {}
    out: dict[str, str] = {}
    for line in paragraphs[-1].splitlines():
        m = re.match(r"([A-Za-z0-9-]+):\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def format_trailers(pairs: Mapping[str, str | None]) -> str:
    """``Key: value`` lines for the values that are set, in the given order."""
    return "".join(f"{key}: {value}\n" for key, value in pairs.items() if value)
