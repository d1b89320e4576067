"""Read-only access to an SGLang git checkout: revisions, package trees read straight from
git objects (never checked out), the per-repo run lock, and commit trailers.

Everything goes through the ``git`` executable (``rev-parse``, ``ls-tree``, one long-lived
``cat-file --batch``), so nothing here touches the user's branch, index or working files.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from forgepatch.errors import BadInput, Failure

LOCK_NAME = "forgepatch.lock"
# a top-level literal only (newer version.py files hold an indented "0.0.0.dev0" fallback)
_VERSION_RE = re.compile(rb"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.M)
_TAG_RE = re.compile(r"v?(\d+(?:\.\d+)*)")


class GitError(Exception):
    def __init__(self, args: list[str], stderr: str):
        super().__init__(f"git {' '.join(args)}: {stderr.strip().splitlines()[-1] if stderr.strip() else 'failed'}")
        self.stderr = stderr


def git(cwd: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> str:
    """Run git in ``cwd``; return stdout (text, stripped of the final newline)."""
    full_env = None
    if env:
        full_env = {**os.environ, **env}
    proc = subprocess.run(
        ["git", *args], cwd=cwd, input=input, capture_output=True, env=full_env, check=False
    )
    if proc.returncode != 0:
        raise GitError(list(args), proc.stderr.decode("utf-8", "replace"))
    return proc.stdout.decode("utf-8", "surrogateescape").removesuffix("\n")


class BlobReader:
    """One ``git cat-file --batch`` process: blob id -> bytes."""

    def __init__(self, root: Path):
        self._proc = subprocess.Popen(
            ["git", "cat-file", "--batch"], cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def read(self, oid: str) -> bytes:
        assert self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(oid.encode() + b"\n")
        self._proc.stdin.flush()
        header = self._proc.stdout.readline().split()
        if len(header) != 3:
            raise Failure(f"git cat-file: object {oid} is missing")
        size = int(header[2])
        data = self._proc.stdout.read(size + 1)
        return data[:size]

    def read_many(self, oids: list[str]) -> list[bytes]:
        """Many blobs in one pipelined exchange: a thread feeds the ids while this one reads
        (no flush/readline round trip per blob, and no pipe deadlock)."""
        assert self._proc.stdin and self._proc.stdout
        stdin, stdout = self._proc.stdin, self._proc.stdout

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
        if self._proc.poll() is None:
            assert self._proc.stdin
            self._proc.stdin.close()
            self._proc.wait()


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

    def prefetch(self, rels: list[str]) -> None:
        """Read these files' blobs in one pipelined batch (the engine asks before a scan)."""
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


class GitRepo:
    """A git repository given by ``--repo`` (validated on construction)."""

    def __init__(self, path: Path):
        path = Path(path)
        if not path.is_dir():
            raise BadInput(f"--repo: {path} is not a directory")
        try:
            top = git(path, "rev-parse", "--show-toplevel")
            common = git(path, "rev-parse", "--path-format=absolute", "--git-common-dir")
        except GitError:
            raise BadInput(f"--repo: {path} is not a git repository") from None
        self.root = Path(top)
        self.git_dir = Path(common)
        self._reader: BlobReader | None = None

    # -- revisions ---------------------------------------------------------------------
    def resolve(self, rev: str) -> str:
        """Full commit SHA of ``rev``; BadInput if the repository has no such commit."""
        if not rev or rev.startswith("-"):
            raise BadInput(f"--rev: invalid revision {rev!r}")
        try:
            return git(self.root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
        except GitError:
            raise BadInput(f"--rev: unknown revision {rev!r} in {self.root}") from None

    def first_parent(self, since: str, until: str = "HEAD") -> list[str]:
        """Commits from ``since`` to ``until`` inclusive along first parents, oldest first."""
        start, end = self.resolve(since), self.resolve(until)
        out = git(self.root, "rev-list", "--first-parent", "--reverse", f"{start}..{end}")
        chain = [start] + [line for line in out.splitlines() if line]
        if start != end and len(chain) == 1:
            raise BadInput(f"--since: {since!r} is not an ancestor of {until!r} along first parents")
        return chain

    def describe(self, sha: str) -> str:
        """A short human label: the tag pointing at ``sha`` if any, else the short SHA."""
        try:
            tags = git(self.root, "tag", "--points-at", sha)
        except GitError:
            tags = ""
        names = sorted(t for t in tags.splitlines() if t)
        return names[0] if names else sha[:12]

    def version_from_tags(self, sha: str) -> str | None:
        try:
            described = git(self.root, "describe", "--tags", "--long", "--match", "v[0-9]*", sha)
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

    # -- trees and blobs ----------------------------------------------------------------
    def tree(self, commit: str, package_dir: str = "python/sglang") -> GitTree:
        """The package at ``commit`` (BadInput if the commit has no SGLang package there)."""
        package_dir = package_dir.strip("/")
        try:
            tree_id = git(self.root, "rev-parse", "--verify", "--quiet", f"{commit}:{package_dir}")
            listing = git(self.root, "ls-tree", "-r", "-z", "--full-tree", commit, "--", f"{package_dir}/")
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
            raise BadInput(
                f"--repo: no SGLang package at {package_dir}/ in {self.root} at {commit[:12]}"
            )
        return GitTree(self, commit, package_dir, tree_id, blobs)

    def blob(self, oid: str) -> bytes:
        if self._reader is None:
            self._reader = BlobReader(self.root)
        return self._reader.read(oid)

    def blobs(self, oids: list[str]) -> list[bytes]:
        if self._reader is None:
            self._reader = BlobReader(self.root)
        return self._reader.read_many(oids)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self) -> "GitRepo":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the run lock ------------------------------------------------------------------
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


def parse_trailers(message: str) -> dict[str, str]:
    """``Key: value`` trailers of the last paragraph of a commit message."""
    paragraphs = [p for p in message.strip().split("\n\n") if p.strip()]
    if not paragraphs:
        return {}
    out: dict[str, str] = {}
    for line in paragraphs[-1].splitlines():
        m = re.match(r"([A-Za-z0-9-]+):\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out
