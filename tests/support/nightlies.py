"""A real git repository standing in for SGLang nightlies: each commit holds the `.py`
sources of one real SGLang release (from its PyPI wheel) under ``python/sglang/``.

Built with ``git fast-import`` (one stream, blobs deduplicated), tagged ``v<version>``.
Wheels are downloaded once into the forgepatch cache (``forgepatch.sources.pypi_wheel``
when available, else ``pip download --no-deps``) and reused across sessions.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

# Layouts of docs/architecture.md (Facts): inline gate, function + server_args, arg_groups + backend check,
# get_platform(), layer_boundary.
NIGHTLY_RELEASES = ["0.5.3", "0.5.6", "0.5.10", "0.5.15", "0.5.20", "0.5.23"]
PACKAGE_DIR = "python/sglang"
_IDENT = "SGLang Test Upstream <upstream@example.invalid>"


def release_wheel(version: str) -> Path:
    """The sglang==version wheel, downloaded once into the cache."""
    try:
        from forgepatch.sources import pypi_wheel  # the core's cached downloader
    except ImportError:
        pypi_wheel = None
    if pypi_wheel is not None:
        return Path(pypi_wheel(version))
    from forgepatch.paths import cache_dir

    dest = cache_dir("wheels", version)  # the layout forgepatch.sources uses
    found = sorted(dest.glob(f"sglang-{version}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={version}", "-d", str(dest)],
            check=True,
        )
        found = sorted(dest.glob(f"sglang-{version}-*.whl"))
    if not found:
        raise RuntimeError(f"no wheel for sglang=={version} in {dest}")
    return found[0]


def wheel_sources(wheel: Path) -> dict[str, bytes]:
    """``python/sglang/<rel>`` -> bytes for every tracked ``.py`` file of the wheel's package."""
    out: dict[str, bytes] = {}
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            # _version.py is generated at build time and not tracked in SGLang's git
            if name.startswith("sglang/") and name.endswith(".py") and name != "sglang/_version.py":
                out[f"python/{name}"] = zf.read(info)
    return out


def _git(repo: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, **kw)


def build_nightlies_repo(dest: Path, releases: list[str] = NIGHTLY_RELEASES) -> Path:
    """Create ``dest`` as a git repo whose branch ``main`` has one commit per release
    (tags ``v<version>``), checked out. Returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    _git(dest, "init", "-q", "-b", "main")
    marks: dict[str, int] = {}
    chunks: list[bytes] = []
    next_mark = 1

    def blob(data: bytes) -> int:
        nonlocal next_mark
        digest = hashlib.sha1(data).hexdigest()
        if digest not in marks:
            marks[digest] = next_mark
            chunks.append(b"blob\nmark :%d\ndata %d\n%s\n" % (next_mark, len(data), data))
            next_mark += 1
        return marks[digest]

    readme = b"Test stand-in for SGLang nightlies: one commit per PyPI release.\n"
    prev = None
    for i, version in enumerate(releases):
        files = wheel_sources(release_wheel(version))
        files["README.md"] = readme
        entries = [(path, blob(data)) for path, data in sorted(files.items())]
        msg = f"sglang {version}\n".encode()
        when = 1_700_000_000 + i * 86_400
        ident = _IDENT.encode()
        commit = [b"commit refs/heads/main\nmark :%d\n" % next_mark]
        commit_mark = next_mark
        next_mark += 1
        commit.append(b"author %s %d +0000\ncommitter %s %d +0000\n" % (ident, when, ident, when))
        commit.append(b"data %d\n%s" % (len(msg), msg))
        if prev is not None:
            commit.append(b"from :%d\n" % prev)
        commit.append(b"deleteall\n")
        commit.extend(b"M 100644 :%d %s\n" % (mark, path.encode()) for path, mark in entries)
        commit.append(b"\n")
        commit.append(b"reset refs/tags/v%s\nfrom :%d\n\n" % (version.encode(), commit_mark))
        chunks.extend(commit)
        prev = commit_mark
    subprocess.run(["git", "-C", str(dest), "fast-import", "--quiet"], input=b"".join(chunks), check=True)
    _git(dest, "checkout", "-q", "-f", "main")
    _git(dest, "config", "user.name", "Fork Maintainer")
    _git(dest, "config", "user.email", "maintainer@example.invalid")
    return dest


def clone_repo(src: Path, dest: Path) -> Path:
    """A private copy of the nightlies repo (objects hardlinked, all tags, branch main)."""
    subprocess.run(["git", "clone", "-q", str(src), str(dest)], check=True, capture_output=True)
    _git(dest, "config", "user.name", "Fork Maintainer")
    _git(dest, "config", "user.email", "maintainer@example.invalid")
    return dest


if __name__ == "__main__":  # python tests/support/nightlies.py DEST [VERSIONS...]
    target = Path(sys.argv[1])
    build_nightlies_repo(target, sys.argv[2:] or NIGHTLY_RELEASES)
    print(target)


def commit_on(repo: Path, parent: str, files: dict[str, bytes | None], message: str, branch: str | None = None) -> str:
    """Commit ``files`` (path -> bytes, None = delete) on top of ``parent`` with plumbing and
    a private index: the working tree and the real index stay untouched. Moves ``branch``
    (refs/heads/...) to the new commit when given. Returns the commit SHA."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index"),
               "GIT_AUTHOR_NAME": "SGLang Test Upstream", "GIT_AUTHOR_EMAIL": "upstream@example.invalid",
               "GIT_COMMITTER_NAME": "SGLang Test Upstream", "GIT_COMMITTER_EMAIL": "upstream@example.invalid"}
        run = lambda *a, **kw: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, env=env, **kw)  # noqa: E731
        run("read-tree", parent)
        for path, data in files.items():
            if data is None:
                run("update-index", "--force-remove", "--", path)
            else:
                oid = run("hash-object", "-w", "--stdin", input=data).stdout.decode().strip()
                run("update-index", "--add", "--cacheinfo", f"100644,{oid},{path}")
        tree = run("write-tree").stdout.decode().strip()
        sha = run("commit-tree", tree, "-p", parent, "-m", message).stdout.decode().strip()
        if branch:
            run("update-ref", f"refs/heads/{branch}", sha)
    return sha


def show(repo: Path, rev: str, path: str) -> bytes:
    return _git(repo, "show", f"{rev}:{path}").stdout


def without_function(source: bytes, name: str) -> bytes:
    """``source`` with the top-level function ``name`` (and its decorators) removed."""
    import ast

    tree = ast.parse(source)
    lines = source.decode("utf-8").splitlines(keepends=True)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            return "".join(lines[:start] + lines[node.end_lineno:]).encode("utf-8")
    raise ValueError(f"no top-level function {name}")


def snapshot(checkout: Path) -> dict[str, str]:
    """sha256 of every file of a checkout that belongs to the user: the working tree
    (tracked, untracked, ignored), ``.git/index``, ``.git/HEAD`` and the local branches."""
    out: dict[str, str] = {}
    for path in sorted(checkout.rglob("*")):
        rel = path.relative_to(checkout).as_posix()
        if rel == ".git" or rel.startswith(".git/") or not path.is_file():
            continue
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    git_dir = checkout / ".git"
    for rel in ("index", "HEAD"):
        out[f".git/{rel}"] = hashlib.sha256((git_dir / rel).read_bytes()).hexdigest()
    refs = _git(checkout, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/", "refs/remotes/", "refs/tags/").stdout.decode()
    for line in refs.splitlines():
        name, oid = line.split()
        if not name.startswith("refs/heads/forgepatch/"):
            out[name] = oid
    return out
