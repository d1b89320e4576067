"""``forgepatch fork``: the branch ``forgepatch/<arch>/<pin>`` = REV + one commit per patch.

The patch series runs on the package read from git objects at REV. Commits are built in a
separate linked worktree (``<git dir>/forgepatch-worktrees/<arch>-<pin>``, created without
checkout: only the files a patch changes are written there), so the user's checked-out
branch, index and working files are never touched. The branch ref moves last, with a
compare-and-swap ``git update-ref``, under the repository's forgepatch lock.

Re-running with identical results (same trees, same messages) moves nothing. When the
result differs, the old head is kept as ``refs/forgepatch/previous/<arch>/<pin>/<UTC
stamp>`` (and stays in the branch's reflog). Drift on a required site moves nothing.

The branch is tied to its pin: a matrix pin given with ``--pin`` must record REV's identity
(``combination.Upstream``), and every commit carries the pin, the upstream commit and its
version as trailers (``combination.Trailer``) for ``release`` to check against the pin.

A series that patches another package (FlashInfer) too gets a branch of the same name in that
package's git checkout (``[pins.PIN.packages.NAME] repo``, else ``[packages.NAME] repo``: a
local checkout) at the pin's git revision of it (``rev``), with that package's part of the
series. Every part is run before any branch moves: a drift in any package moves nothing; a
pin that names the package by a PyPI release, or a repository that is not a local checkout,
is refused (exit 2) before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch.combination import Trailer, Upstream, branch_name, pin_identity
from forgepatch.errors import BadInput, Failure
from forgepatch.fork import worktrees
from forgepatch.infra.gitrepo import GitError, GitRepo, format_trailers, parse_trailers
from forgepatch import progress, utctime
from forgepatch.arch import get_arch
from forgepatch.infra.journal import notify
from forgepatch.patching.series import for_package, load_series, package_checkout, packages_of, run_series

PREVIOUS_PREFIX = "refs/forgepatch/previous"
WORKTREES = worktrees.WORKTREES
# hooks and signing are the user's business on their own commits, not on generated ones
_QUIET_GIT = ("-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false")


@dataclass
class ForkCommit:
    patch: str
    sha: str
    files: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"patch": self.patch, "sha": self.sha, "files": self.files}


@dataclass
class ForkResult:
    arch: str
    pin: str
    branch: str
    upstream: str
    version: str | None
    patchset: str
    status: str  # "created" | "updated" | "unchanged" | "drift" | "held" (another package drifted)
    head: str | None = None
    previous_head: str | None = None
    previous_ref: str | None = None
    commits: list[ForkCommit] = field(default_factory=list)
    apply: Any = None  # ApplyResult
    package: str = "sglang"
    repo: str | None = None  # the checkout the branch is in
    packages: list["ForkResult"] = field(default_factory=list)  # the branches of the other packages

    @property
    def drift(self) -> bool:
        return self.status == "drift" or any(p.drift for p in self.packages)

    def to_json(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "pin": self.pin,
            "branch": self.branch,
            "upstream": self.upstream,
            "version": self.version,
            "patchset": self.patchset,
            "status": self.status,
            "head": self.head,
            "previous_head": self.previous_head,
            "previous_ref": self.previous_ref,
            "commits": [c.to_json() for c in self.commits],
            "patches": [p.to_json() for p in self.apply.patches] if self.apply is not None else [],
            "package": self.package,
            "repo": self.repo,
            "packages": [p.to_json() for p in self.packages],
        }


def commit_message(summary: str, patch_id: str, arch: str, pin: str, upstream: Upstream, patchset: str) -> str:
    return f"{summary.strip()}\n\n" + format_trailers({
        Trailer.PATCH: patch_id, Trailer.ARCH: arch, Trailer.PIN: pin, Trailer.UPSTREAM: upstream.revision,
        Trailer.UPSTREAM_VERSION: upstream.version, Trailer.PATCHSET: patchset,
    })


def choose_pin(matrix, repo: GitRepo, rev: str | None, pin: str | None) -> tuple[str, Upstream, object]:
    """(pin name, the upstream identity of REV, its package tree).

    ``--pin`` alone takes a git pin's rev from matrix.toml. ``--rev`` alone names the branch
    after a git pin of matrix.toml with that commit, else the tag given, else the short SHA.
    Both: the pin's recorded identity must be REV's (exit 2 naming both otherwise)."""
    known = matrix.pins.get(pin) if pin else None
    if rev is None:
        if known is None or known.rev is None:
            raise BadInput("fork: give --rev REV (or --pin NAME of a git-revision pin in matrix.toml)")
        rev = known.rev
    sha = repo.resolve(rev)
    tree = repo.tree(sha, matrix.upstream.package_dir)
    found = Upstream("git", tree.version(), sha)
    if pin is None:
        named = [n for n, p in matrix.pins.items() if p.rev and pin_identity(p, repo).revision == sha]
        pin = named[0] if named else (rev if repo.is_tag(rev) else sha[:12])
    elif known is not None:
        want = pin_identity(known, repo)
        if found.mismatch(want):
            raise BadInput(f"--pin: {pin!r} is {want.describe()} in matrix.toml, but --rev {rev!r} is {found.describe()}")
    return pin, found, tree


def fork(
    repo_path: Path,
    arch_name: str,
    rev: str | None,
    pin: str | None,
    matrix,
    patches_dir: Path,
) -> ForkResult:
    """Create or refresh ``forgepatch/<arch>/<pin>``; see the module docstring."""
    arch = get_arch(arch_name)

    full = load_series(matrix, arch, patches_dir)
    with GitRepo(repo_path) as repo:
        pin, found, tree = choose_pin(matrix, repo, rev, pin)
        branch = branch_name(arch.name, pin)
        if not repo.valid_ref(f"refs/heads/{branch}"):
            raise BadInput(f"--pin: {pin!r} does not make a valid branch name ({branch})")
        # the other packages' checkouts and revisions, checked before anything runs
        others = [_package_target(matrix, full, pin, name) for name in packages_of(full) if name != "sglang"]
        # the sglang repository's branch: the sglang part of the series
        series = for_package(full, "sglang", matrix)

        # every other package's part first, in memory: a drift there moves no branch at all
        drifted = [_drift_result(t, arch, pin, branch, progress) for t in others]
        if any(d is not None for d in drifted):
            with progress.task(f"patching {found.revision[:12]} for {arch.name}"):
                result = run_series(series, tree, found.version)
            # "held": this part holds, but another package's drifted, so no branch moves
            out = ForkResult(arch.name, pin, branch, found.revision, found.version, series.hash,
                             "drift" if result.drift else "held", apply=result, repo=str(repo.root))
            out.packages = [d for d in drifted if d is not None]
            return out
        with repo.lock():
            try:
                out = _fork_locked(repo, series, tree, found, arch, pin, branch, series.hash, progress)
            except GitError as exc:
                raise Failure(worktrees.ref_lock_message(repo, exc) or str(exc)) from None
        out.repo = str(repo.root)
    if out.drift:
        return out
    for target in others:
        out.packages.append(_fork_package(target, arch, pin, branch, progress))
    return out


@dataclass
class _PackageTarget:
    name: str
    checkout: Path
    rev: str
    package_dir: str
    series: Any  # its part of the series


def _package_target(matrix, full, pin: str, name: str) -> _PackageTarget:
    """Where package ``name``'s fork branch goes (``patching.series.package_checkout``, which
    ``release`` reads too; BadInput, one line, when it cannot)."""
    where = package_checkout(matrix, full, pin, name, "fork: ")
    return _PackageTarget(name, where.checkout, where.rev, where.package_dir, for_package(full, name, matrix))


def _package_tree(repo: GitRepo, target: _PackageTarget):
    flag = f"pins.PIN.packages.{target.name}.rev"
    sha = repo.resolve(target.rev, flag)
    try:
        tree = repo.tree(sha, target.package_dir)
    except BadInput:
        raise BadInput(f"{flag}: no {target.name} package at {target.package_dir}/ in {repo.root} at {sha[:12]}") from None
    return tree, Upstream("git", tree.version(), sha)


def _drift_result(target: _PackageTarget, arch, pin: str, branch: str, progress) -> ForkResult | None:
    """The package's part of the series run in memory: its drift result, or None."""
    with GitRepo(target.checkout, f"packages.{target.name}.repo") as repo:
        tree, found = _package_tree(repo, target)
        with progress.task(f"patching {target.name} {found.revision[:12]} for {arch.name}"):
            result = run_series(target.series, tree, found.version)
        if not result.drift:
            return None
        return ForkResult(arch.name, pin, branch, found.revision, found.version, target.series.hash, "drift",
                          apply=result, package=target.name, repo=str(repo.root))


def _fork_package(target: _PackageTarget, arch, pin: str, branch: str, progress) -> ForkResult:
    """The package's branch in its checkout (as the sglang one: ``_fork_locked``)."""
    with GitRepo(target.checkout, f"packages.{target.name}.repo") as repo:
        tree, found = _package_tree(repo, target)
        with repo.lock():
            try:
                out = _fork_locked(repo, target.series, tree, found, arch, pin, branch, target.series.hash, progress)
            except GitError as exc:
                raise Failure(worktrees.ref_lock_message(repo, exc) or str(exc)) from None
        out.package, out.repo = target.name, str(repo.root)
        return out


def _fork_locked(repo: GitRepo, series, tree, found: Upstream, arch, pin: str, branch: str, patchset: str,
                 progress) -> ForkResult:
    """The fork under the repository's lock: first remove what a killed run left."""
    upstream, version = found.revision, found.version
    left = worktrees.prune_leftovers(repo)
    if left:
        notify(f"{repo.root}: removed {left} worktree(s) left by an interrupted fork")
    with progress.task(f"patching {upstream[:12]} for {arch.name}"):
        result = run_series(series, tree, version)
    out = ForkResult(arch.name, pin, branch, upstream, version, patchset, "drift", apply=result)
    if result.drift:
        return out
    _refuse_checked_out(repo, branch)
    old = repo.ref(f"refs/heads/{branch}")
    new, commits = _build_commits(repo, tree, found, result, arch.name, pin, patchset)
    out.head, out.commits = new, commits
    if old is not None and _same_series(repo, upstream, old, new):
        out.status, out.head = "unchanged", old
        out.commits = _existing_commits(repo, upstream, old)
        return out
    if old is not None:
        out.previous_head = old
        out.previous_ref = _keep_previous(repo, arch.name, pin, old)
    reason = f"forgepatch fork: {arch.name} patches on {upstream[:12]} ({patchset[:12]})"
    repo.run("update-ref", "-m", reason, f"refs/heads/{branch}", new, old or "")
    out.status = "updated" if old is not None else "created"
    return out


# -- building ------------------------------------------------------------------------------
def _build_commits(repo: GitRepo, tree, found: Upstream, result, arch: str, pin: str, patchset: str):
    """Commit each patch's changes on top of ``upstream`` in a private linked worktree;
    returns (head sha, commits). Nothing outside ``<git dir>/forgepatch-worktrees`` and the
    object store is written."""
    wt = worktrees.base(repo) / worktrees.slug(arch, pin)
    worktrees.drop(repo, wt)
    wt.parent.mkdir(parents=True, exist_ok=True)
    upstream = found.revision
    repo.run("worktree", "add", "--detach", "--no-checkout", "-q", str(wt), upstream)
    env = repo.identity_env()
    try:
        repo.run("read-tree", upstream, cwd=wt)  # index = upstream; only changed files get written
        state = dict(result.originals)
        commits: list[ForkCommit] = []
        for patch in result.patches:
            touched = sorted(rel for rel, text in patch.changes.items() if state.get(rel) != text)
            if not touched:
                continue
            paths = []
            for rel in touched:
                path = f"{tree.package_dir}/{rel}"
                target = wt / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(result.encode(rel, patch.changes[rel]))  # the file's own encoding
                state[rel] = patch.changes[rel]
                paths.append(path)
            repo.run("add", "--", *paths, cwd=wt)
            msg = wt.with_name(wt.name + ".msg")
            msg.write_text(commit_message(patch.summary, patch.patch_id, arch, pin, found, patchset), encoding="utf-8")
            try:
                repo.run(*_QUIET_GIT, "commit", "-q", "--no-verify", "-F", str(msg), cwd=wt, env=env)
            finally:
                msg.unlink(missing_ok=True)
            commits.append(ForkCommit(patch.patch_id, repo.run("rev-parse", "HEAD", cwd=wt), paths))
        head = repo.run("rev-parse", "HEAD", cwd=wt)
    finally:
        worktrees.drop(repo, wt)
        try:
            wt.parent.rmdir()
        except OSError:
            pass
    return head, commits


# -- comparing and moving refs -------------------------------------------------------------
def _refuse_checked_out(repo: GitRepo, branch: str) -> None:
    listing = repo.run("worktree", "list", "--porcelain")
    path = None
    for line in listing.splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree "):]
        elif line == f"branch refs/heads/{branch}":
            raise BadInput(f"fork: branch {branch} is checked out in {path}; switch that worktree to another branch first")


def _series(repo: GitRepo, upstream: str, head: str) -> list[tuple[str, str]] | None:
    """(tree, message) of each commit from upstream (exclusive) to head along first
    parents, oldest first; None if head does not descend from upstream that way."""
    out = repo.run("log", "--first-parent", "--reverse", "--format=%H%x00%T%x00%P%x00%B%x1e", f"{upstream}..{head}")
    rows = [r.strip("\n") for r in out.split("\x1e") if r.strip("\n")]
    series, parent = [], upstream
    for row in rows:
        sha, tree, parents, body = row.split("\x00", 3)
        if parents.split()[:1] != [parent]:
            return None
        series.append((tree, body.strip()))
        parent = sha
    if parent != head:
        return None
    return series


def _same_series(repo: GitRepo, upstream: str, old: str, new: str) -> bool:
    a = _series(repo, upstream, old)
    return a is not None and a == _series(repo, upstream, new)


def _existing_commits(repo: GitRepo, upstream: str, head: str) -> list[ForkCommit]:
    out = repo.run("log", "--first-parent", "--reverse", "--name-only", "--format=%x1e%H%x00%B%x00", f"{upstream}..{head}")
    commits = []
    for row in out.split("\x1e"):
        if not row.strip():
            continue
        sha, body, files = row.split("\x00", 2)
        commits.append(ForkCommit(parse_trailers(body).get(Trailer.PATCH, ""), sha, [f for f in files.split("\n") if f]))
    return commits


def _keep_previous(repo: GitRepo, arch: str, pin: str, old: str) -> str:
    stamp = utctime.compact()
    base = f"{PREVIOUS_PREFIX}/{arch}/{pin}/{stamp}"
    ref, n = base, 1
    while repo.ref(ref) is not None:
        n += 1
        ref = f"{base}-{n}"
    repo.run("update-ref", "-m", "forgepatch fork: previous head", ref, old, "")
    return ref
