"""`release` killed (SIGKILL) and interrupted (SIGINT, Ctrl-C) at each of its file-system calls
— its own (the results archive, the ledger lock, the pending record of its registry tags, the
ledger) and its `git tag` child's (the ref's lock file, strace ``-P``) — and with the registry
failing at the n-th request it makes, or down from the start (issue 27).

After each, the next `release` finishes it (or it had changed nothing), saying so in at most
one line: the git tag, the ledger entry and both registry tags, or none of them; no lock file,
temp file or pending record left; `verify` passes. A registry tag is never set for a release
the ledger does not have.

Each case gets its own copy of the fork repository, its own ledger and its own registry
repository (the one pushed image, mounted blob by blob into a new name, so each case starts
with no tag in the registry), so cases run three at a time; they go through a fault-injecting
proxy on 127.0.0.1 (tests/support/faulty_proxy.py; a registry-fault case has its own, with
its own request count) in front of the real registry.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.killmatrix import _cli, crash_matrix
from support.release_world import ARCH, PIN, RUN_ID, TAG, World, cli_env, git
from support.local_registry import registry_http

pytestmark = pytest.mark.docker
VALIDATED, RELEASE_TAG = f"{PIN}-{ARCH}-validated", "forgepatch-p23-sm120"
ACCEPT = ", ".join(["application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json"])


@pytest.fixture(scope="module")
def proxy(registry):
    from support.faulty_proxy import FaultyProxy

    p = FaultyProxy(registry.host)
    yield p
    p.stop()


@dataclass
class Base:
    world: World
    results: Path
    digest: str  # the pushed image's manifest digest
    image_id: str
    upstream: str  # the registry behind the proxy

    def path(self, repo: str) -> str:
        return repo.split("/", 1)[1]  # the repository's path, without the proxy's host


@pytest.fixture(scope="module")
def base(tmp_path_factory, template_repo, docker_client, base_image, release_images, registry, proxy) -> Base:
    """One image built, pushed (through the proxy) and smoked, once for the module."""
    root = tmp_path_factory.mktemp("release-kills")
    w = World(root, template_repo, docker_client, base_image, RUN_ID)
    w.image_repo = proxy.repo(f"forgepatch-test/kills-{RUN_ID}-{uuid.uuid4().hex[:6]}")
    w.write_matrix()
    record = root / "builds.json"
    built = w.on("build", "--arch", ARCH, "--pin", PIN, "--context-dir", root / "context", "--push", "--record",
                 record, "--json")
    assert built.rc == 0, built.err
    release_images.add(built.json()["image_id"])
    results = w.smoke("--builds", str(record))
    return Base(w, results, built.json()["digest"].partition("@")[2], built.json()["image_id"], registry.host)


def _mirror(base: Base, repo: str) -> None:
    """The pushed image under the new repository ``repo`` (blobs mounted, manifest put by
    digest: the same digest, no tag)."""
    src, dst = base.path(base.world.image_repo), base.path(repo)
    status, headers, raw = registry_http(base.upstream, "GET", f"/v2/{src}/manifests/{base.digest}", headers={"Accept": ACCEPT})
    assert status == 200, (status, raw[:200])
    doc = json.loads(raw)
    for blob in [doc["config"]["digest"], *(layer["digest"] for layer in doc["layers"])]:
        status, _, body = registry_http(base.upstream, "POST", f"/v2/{dst}/blobs/uploads/?mount={blob}&from={src}", b"")
        assert status == 201, (status, body[:200])
    status, _, body = registry_http(base.upstream, "PUT", f"/v2/{dst}/manifests/{base.digest}", raw,
                            {"Content-Type": headers.get("Content-Type", doc.get("mediaType", ""))})
    assert status == 201, (status, body[:200])


def _head(base: Base, repo: str, tag: str) -> str | None:
    status, headers, _ = registry_http(base.upstream, "HEAD", f"/v2/{base.path(repo)}/manifests/{tag}", headers={"Accept": ACCEPT})
    return headers.get("Docker-Content-Digest") if status == 200 else None


def make_case(base: Base, d: Path, proxy=None) -> Path:
    """A fresh release case in ``d``: the fork repo, a matrix and results naming a new
    registry repository holding the image (through ``proxy``, default the module's), no
    ledger."""
    d.mkdir(parents=True)
    shutil.copytree(base.world.repo / ".git", d / "fork" / ".git", symlinks=True)
    repo = f"{base.world.image_repo}-{uuid.uuid4().hex[:8]}"
    if proxy is not None:
        repo = f"{proxy.host}/{base.path(repo)}"
    _mirror(base, repo)
    (d / "image-repo").write_text(repo)
    (d / "matrix.toml").write_text(base.world.config.read_text().replace(base.world.image_repo, repo))
    (d / "results.json").write_text(base.results.read_text().replace(base.world.image_repo, repo))
    return d


def args(base: Base) -> list[str]:
    return ["--config", "matrix.toml", "--patches", str(base.world.patches), "release", "--repo", "fork",
            "--results", "results.json", "--arch", ARCH, "--pin", PIN]


def _ledger_key(d: Path) -> str:
    return hashlib.sha256(str((d / "releases" / "ledger.json").resolve()).encode()).hexdigest()[:32]


def state(base: Base, d: Path) -> dict:
    """What a release changes: git tags, lock files in the repo, the ledger directory, the
    pending record of its registry tags (and its temp files), the registry's tags, the local
    ``validated`` tag."""
    import docker.errors

    from forgepatch.paths import cache_dir

    repo = (d / "image-repo").read_text()
    releases = d / "releases"
    files = sorted("results/<archive>" if p.parent.name == "results" else str(p.relative_to(releases))
                   for p in releases.rglob("*") if p.is_file()) if releases.exists() else []
    ledger = releases / "ledger.json"
    try:
        local = base.world.client.images.get(f"{repo}:{VALIDATED}").id
    except docker.errors.ImageNotFound:
        local = None
    return {
        "git tags": git(d / "fork", "tag", "-l", "forgepatch/*").split(),
        # git's lock files (a ref's, the index's, packed-refs'); forgepatch.lock is the fork's flock file, kept
        "git locks": sorted(str(p.relative_to(d)) for p in (d / "fork" / ".git").rglob("*.lock")
                            if p.name != "forgepatch.lock"),
        "releases": files,
        "ledger": [e["tag"] for e in json.loads(ledger.read_text())["releases"]] if ledger.exists() else [],
        "pending": sorted(p.name for p in cache_dir("pending-tags").glob(f"*{_ledger_key(d)}*")),
        "registry": {tag: _head(base, repo, tag) for tag in (VALIDATED, RELEASE_TAG)},
        "local validated": local,
    }


def finished_state(base: Base) -> dict:
    return {"git tags": [TAG], "git locks": [], "releases": ["ledger.json", "results/<archive>"], "ledger": [TAG],
            "pending": [], "registry": {VALIDATED: base.digest, RELEASE_TAG: base.digest},
            "local validated": None}  # an image smoked by its registry digest is tagged there, not in the engine


def original_state() -> dict:
    return {"git tags": [], "git locks": [], "releases": [], "ledger": [], "pending": [],
            "registry": {VALIDATED: None, RELEASE_TAG: None}, "local validated": None}


def next_release(base: Base, d: Path) -> subprocess.CompletedProcess:
    """The next `release` in the case; when it has released, `verify` must pass as well."""
    run = _cli(args(base), d, env=cli_env())
    if run.returncode == 0 and (d / "releases" / "ledger.json").exists():
        v = _cli(["--config", "matrix.toml", "verify", TAG, "--repo", "fork"], d, env=cli_env())
        assert v.returncode == 0, v.stdout + v.stderr
    return run


def test_a_release_killed_or_interrupted_at_each_syscall_is_finished_by_the_next(base, tmp_path):
    from forgepatch.paths import cache_dir

    done = make_case(base, tmp_path / "done")
    assert original_state() == state(base, done)
    first = _cli(args(base), done, env=cli_env())
    assert first.returncode == 0, first.stderr
    assert state(base, done) == finished_state(base)

    def ref_lock(call: str):
        def opts(d: Path, sig: str) -> list[str]:  # the `git tag` child's ref lock, by path
            lock = d / "fork" / ".git" / "refs" / "tags" / f"{TAG}.lock"
            return ["-P", str(lock), "-e", f"inject={call}:signal={sig}:when=1"]
        return opts

    states = crash_matrix(
        tmp_path, lambda d: make_case(base, d), args(base), lambda d: next_release(base, d),
        original=original_state(), finished=finished_state(base), recovered="release", creates=True,
        view=lambda d: state(base, d), inside=(cache_dir("pending-tags"), cache_dir("locks")), env=cli_env(),
        extra=[("git-ref-lock-open", ref_lock("openat")), ("git-ref-lock-rename", ref_lock("rename"))],
        also_ok=("removed the lock file a git killed",), effective=True)
    # the next release always finishes what a killed one began
    assert set(states.values()) == {"finished"}, states
    assert len(states) >= 2 * 8, sorted(states)  # archive, lock, pending record, ledger: each a few calls


def test_the_registry_failing_at_each_request_or_down_is_finished_by_the_next_release(base, registry, tmp_path):
    """Each case its own proxy (its own request count) in front of the one registry, three at
    a time."""
    from concurrent.futures import ThreadPoolExecutor

    from support.faulty_proxy import FaultyProxy

    def one(case) -> tuple:
        kind, n = case
        proxy = FaultyProxy(registry.host)
        try:
            d = make_case(base, tmp_path / f"{kind}-{n}", proxy)
            proxy.down = kind == "down"
            proxy.fail_request(n)
            run = _cli(args(base), d, env=cli_env())
            requests = proxy.requests
            proxy.down = False
            proxy.fail_request(None)
            lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
            if kind == "count":
                assert run.returncode == 0, run.stderr
                return requests
            assert run.returncode in (1, 2) and len(lines) == 1 and "Traceback" not in run.stderr, (kind, n, run.stderr)
            now = state(base, d)
            if kind == "down":
                assert now == original_state(), now  # refused before anything was written
            else:
                assert now["git locks"] == [] and not any(t.endswith(".tmp") for t in now["pending"]), now
            # never a registry tag for a release the ledger does not have
            if TAG not in now["ledger"]:
                assert now["registry"] == {VALIDATED: None, RELEASE_TAG: None}, (kind, n, now)
            again = next_release(base, d)
            notes = [ln for ln in again.stderr.splitlines() if ln.strip()]
            assert again.returncode == 0 and len(notes) <= 1, (kind, n, again.stderr)
            assert state(base, d) == finished_state(base), (kind, n)
            if now["ledger"] == [TAG] and now["registry"][RELEASE_TAG] is None:
                assert notes and f"completed an interrupted release of {TAG}" in notes[0], (kind, n, notes)
            shutil.rmtree(d)
            return kind, n
        finally:
            proxy.stop()

    requests = one(("count", None))
    assert requests >= 2, requests  # at least the two manifest PUTs
    cases = [("down", None), *(("request", n) for n in range(1, requests + 1))]
    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(one, cases)) == cases
