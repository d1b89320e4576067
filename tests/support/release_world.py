"""A small real world for release tests: a git repo holding a real SGLang release tree with
a fork branch made by `forgepatch fork`, images built by the real `forgepatch build` on the
local base image, and smoke results written by the real `forgepatch smoke` (docker runner)
running command profiles in those images.

Each test gets its own image repository name; the images the tests made or reused are
removed by ID, with their untagged step images, when the session ends (``remove_images``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCH, PIN, VERSION = "sm120", "p23", "0.5.23"
PATCH = "sm120-flashinfer-allreduce-fusion"
BRANCH = f"forgepatch/{ARCH}/{PIN}"
TAG = f"forgepatch/{PIN}/{ARCH}"
RUN_ID = uuid.uuid4().hex[:8]  # one image repository name space per test session
CUBLAS = "CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmStridedBatchedEx"

OK = "python3 -c 'print(\"ok\")'"
FAIL = f"sh -c 'echo \"RuntimeError: {CUBLAS}\"; exit 1'"

MATRIX = """\
default_pin = "{pin}"

[pins.{pin}]
pypi = "{version}"

[pins.p20]
pypi = "0.5.20"

[arches.{arch}]
patches = ["{patch}"]
base_image = "{base}"
profiles = ["ok", "gate", "extra"]
pins = ["{pin}"]

[arches.sm90]
patches = []
base_image = "{base}"
profiles = ["ok"]

[profiles.ok]
kind = "command"
command = {ok}
gpus = 0
timeout_s = 60

[profiles.gate]
kind = "command"
command = {gate}
gpus = 0
timeout_s = 60

[profiles.extra]
kind = "command"
command = {extra}
gpus = 0
timeout_s = 60
required = false

[smoke]
image_repo = "{repo}"

[release]
tag_template = "forgepatch/{{pin}}/{{arch}}"
ledger = "releases/ledger.json"
"""


def reasons(r: subprocess.CompletedProcess) -> dict[str, list[str]]:
    """code -> messages of every refusal reason in a `release --json` document."""
    out: dict[str, list[str]] = {}
    for comb in json.loads(r.stdout)["combinations"]:
        for reason in comb["reasons"]:
            out.setdefault(reason["code"], []).append(reason["message"])
    return out


def git(repo: Path, *args: str, **kw) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, **kw).stdout.strip()


def cli_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))


def cli(*args, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "forgepatch", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=cli_env(), timeout=timeout)


def upstream_repo(dest: Path) -> Path:
    """A git repo whose ``main`` holds the real sglang==VERSION sources at python/sglang/
    (tagged v<VERSION>), as SGLang's own repository lays them out."""
    from forgepatch.sources import pypi_tree

    package = pypi_tree(VERSION).package
    dest.mkdir(parents=True)
    git(dest, "init", "-q", "-b", "main")
    shutil.copytree(package, dest / "python" / "sglang")
    (dest / "README.md").write_text(f"sglang {VERSION} sources for forgepatch release tests\n")
    git(dest, "add", "-A")
    env = dict(os.environ, GIT_AUTHOR_NAME="SGLang Test Upstream", GIT_AUTHOR_EMAIL="upstream@example.invalid",
               GIT_COMMITTER_NAME="SGLang Test Upstream", GIT_COMMITTER_EMAIL="upstream@example.invalid",
               GIT_AUTHOR_DATE="1700000000 +0000", GIT_COMMITTER_DATE="1700000000 +0000")
    subprocess.run(["git", "-C", str(dest), "commit", "-q", "-m", f"sglang {VERSION}"], check=True, env=env)
    git(dest, "tag", f"v{VERSION}")
    git(dest, "config", "user.name", "Fork Maintainer")
    git(dest, "config", "user.email", "maintainer@example.invalid")
    return dest


def patchset_of(patches: Path, ids=(PATCH,)) -> str:
    from forgepatch.patching.patchset import load_patches, patchset_hash

    return patchset_hash(load_patches(patches, list(ids)))


def make_fork(repo: Path, config: Path, patches: Path) -> str:
    """The fork branch, made by ``forgepatch fork``; returns its head."""
    r = cli("--config", config, "--patches", patches, "fork", "--arch", ARCH, "--repo", repo,
            "--rev", f"v{VERSION}", "--pin", PIN, "--json")
    assert r.returncode == 0, r.stderr
    return git(repo, "rev-parse", f"refs/heads/{BRANCH}")


def fork_template(root: Path) -> Path:
    """The upstream repo with the fork branch made once, packed so copies are cheap."""
    from forgepatch.paths import SHIPPED_PATCHES

    repo = upstream_repo(root / "fork")
    config = root / "matrix.toml"
    config.write_text(f'default_pin = "{PIN}"\n[pins.{PIN}]\npypi = "{VERSION}"\n'
                      f'[arches.{ARCH}]\npatches = ["{PATCH}"]\n')
    make_fork(repo, config, SHIPPED_PATCHES)
    git(repo, "gc", "-q", "--prune=now")
    return repo


class World:
    """One test's repo, matrix, patches, ledger and images."""

    def __init__(self, root: Path, template_repo: Path, client, base_image: str, run_id: str):
        self.root, self.client, self.base, self.run_id = root, client, base_image, run_id
        self.repo = root / "fork"
        # the git directory only (one pack, see pack_repo): release reads refs and objects
        shutil.copytree(template_repo / ".git", self.repo / ".git", symlinks=True)
        self.patches = root / "patches"
        from forgepatch.paths import SHIPPED_PATCHES

        shutil.copytree(SHIPPED_PATCHES, self.patches)
        self.image_repo = f"forgepatch-test/release-{run_id}-{uuid.uuid4().hex[:6]}"
        self.config = root / "matrix.toml"
        self.write_matrix()
        self.ledger = root / "releases" / "ledger.json"
        self._results = 0
        self.content_tag: str | None = None
        self.built: set[str] = set()  # image IDs this world made or reused

    # -- config ------------------------------------------------------------------------
    def write_matrix(self, gate: str = OK, extra: str = FAIL) -> None:
        self.config.write_text(MATRIX.format(pin=PIN, version=VERSION, arch=ARCH, patch=PATCH, base=self.base,
                                             repo=self.image_repo, ok=json.dumps(OK), gate=json.dumps(gate),
                                             extra=json.dumps(extra)))

    @property
    def patchset(self) -> str:
        return patchset_of(self.patches)

    # -- images ------------------------------------------------------------------------
    def build(self) -> str:
        """The image for (ARCH, PIN), by the real `forgepatch build` on the base image (a
        cache hit when an earlier test built the same content). Returns the image ID;
        ``self.content_tag`` is its build tag."""
        return self._build(force=False)

    def rebuild(self) -> str:
        """Rebuild: a new image ID under the same tags (`forgepatch build --force`)."""
        return self._build(force=True)

    def _build(self, force: bool) -> str:
        r = self.run("build", "--arch", ARCH, "--pin", PIN, "--context-dir", self.root / "context", "--json",
                     *(["--force"] if force else []))
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        self.content_tag = doc["tags"][0]
        self.built.add(doc["image_id"])
        return doc["image_id"]

    @property
    def validated(self) -> str:
        return f"{self.image_repo}:{PIN}-{ARCH}-validated"

    def image_id(self, ref: str) -> str | None:
        import docker.errors

        try:
            return self.client.images.get(ref).id
        except docker.errors.ImageNotFound:
            return None

    # -- smoke -------------------------------------------------------------------------
    def smoke(self, *args: str) -> Path:
        """Run the real `forgepatch smoke` (docker runner) and keep its JSON as a results file."""
        r = cli("--config", self.config, "smoke", "--runner", "docker", "--arch", ARCH, "--pin", PIN,
                "--logs", self.root / "logs", "--json", *args)
        assert r.returncode in (0, 1), r.stderr
        self._results += 1
        path = self.root / f"smoke-{self._results}.json"
        path.write_text(r.stdout)
        assert json.loads(r.stdout)["jobs"], r.stderr
        return path

    # -- release -----------------------------------------------------------------------
    def run(self, *args, cwd=None) -> subprocess.CompletedProcess:
        return cli("--config", self.config, "--patches", self.patches, *args, cwd=cwd)

    def on(self, *args, host: str | None = None):
        """Run the CLI on this world, against the engine at ``host`` (DOCKER_HOST) if given."""
        from support.cli import Run
        env = cli_env()
        if host:
            env["DOCKER_HOST"] = host
        proc = subprocess.run([sys.executable, "-m", "forgepatch", "--config", str(self.config), "--patches",
                               str(self.patches), *map(str, args)], capture_output=True, text=True, env=env,
                              timeout=600)
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def release(self, results: Path, *args) -> subprocess.CompletedProcess:
        return self.run("release", "--repo", self.repo, "--results", results, "--arch", ARCH, "--pin", PIN, *args)

    def verify(self, *args) -> subprocess.CompletedProcess:
        return self.run("verify", TAG, "--repo", self.repo, *args)

    def tags(self) -> list[str]:
        return [t for t in git(self.repo, "tag", "-l", "forgepatch/*").splitlines() if t]

    def ledger_bytes(self) -> bytes | None:
        return self.ledger.read_bytes() if self.ledger.exists() else None

    def cleanup(self) -> None:
        """Nothing to do per test: this world's tags live in its own image repo, and the
        images (``self.built``) are removed by ID at the end of the session
        (``remove_images``), so later tests get cache hits from the real builder."""


def remove_images(client, ids) -> list[str]:
    """Remove images by ID (all their tags); returns the IDs still present afterwards."""
    import docker.errors

    for image_id in ids:
        try:
            client.images.remove(image_id, force=True)  # its untagged step images go with it
        except docker.errors.APIError:
            pass
    left = []
    for image_id in ids:
        try:
            client.images.get(image_id)
            left.append(image_id)
        except docker.errors.ImageNotFound:
            pass
    return left


# -- a series over SGLang and FlashInfer ---------------------------------------------------------
FI_VERSION = "0.6.1"  # lists [9, 10] / [10] and checks major 10 in its launcher: both FlashInfer patches apply
FI_PATCHES = ("fi-jit-majors", "fi-moe-launcher")
PACKAGES_FIXTURE = ROOT / "tests" / "fixtures" / "packages" / "patches"


def fi_upstream(dest: Path) -> tuple[Path, str, str]:
    """A git checkout of FlashInfer as its package ships: every file of the real
    flashinfer-python==FI_VERSION wheel's ``flashinfer/`` in one commit (tagged), then a later
    commit; returns (repo, release commit, later commit)."""
    import zipfile

    from forgepatch.packages import KNOWN
    from forgepatch.sources import pypi_wheel

    wheel = pypi_wheel(FI_VERSION, KNOWN["flashinfer"].dist)
    dest.mkdir(parents=True)
    git(dest, "init", "-q", "-b", "main")
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.filename.startswith("flashinfer/") and not info.is_dir():
                target = dest / info.filename
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(info))
    ident = ["-c", "user.name=FlashInfer Test Upstream", "-c", "user.email=fi@example.invalid"]
    git(dest, "add", "-A")
    git(dest, *ident, "commit", "-qm", f"flashinfer {FI_VERSION}")
    git(dest, "tag", f"v{FI_VERSION}")
    release = git(dest, "rev-parse", "HEAD")
    (dest / "NOTES.md").write_text("a later upstream commit\n")
    git(dest, "add", "NOTES.md")
    git(dest, *ident, "commit", "-qm", "notes")
    return dest, release, git(dest, "rev-parse", "HEAD")


class PackagesWorld(World):
    """A world whose sm120 series patches FlashInfer too (the fixture patches of
    tests/fixtures/packages): pin p23 takes FlashInfer at a git revision of a checkout of it
    (``fi``, a clone of ``fi_upstream``), as ``fork`` needs; the fork branches are made in the
    fork repository and in that checkout by ``forgepatch fork``."""

    def __init__(self, root: Path, template_repo: Path, client, base_image: str, run_id: str, fi: Path, fi_rev: str):
        self.fi, self.fi_rev = fi, fi_rev
        super().__init__(root, template_repo, client, base_image, run_id)
        for name in FI_PATCHES:
            for path in PACKAGES_FIXTURE.glob(f"{name}.*"):
                shutil.copy2(path, self.patches / path.name)

    def write_matrix(self, gate: str = OK, extra: str = FAIL) -> None:
        super().write_matrix(gate, extra)
        text = self.config.read_text()
        series = f'patches = ["{PATCH}"]'
        assert text.count(series) == 1
        text = text.replace(series, "patches = " + json.dumps([PATCH, *FI_PATCHES]))
        pin = f'[pins.{PIN}]\npypi = "{VERSION}"\n'
        assert text.count(pin) == 1
        text = text.replace(pin, '[packages.flashinfer]\npypi = "flashinfer-python"\nimport_name = "flashinfer"\n'
                            f'package_dir = "flashinfer"\n\n{pin}\n[pins.{PIN}.packages.flashinfer]\n'
                            f'rev = "{self.fi_rev}"\nrepo = "{self.fi}"\n')
        self.config.write_text(text)

    @property
    def patchset(self) -> str:
        return patchset_of(self.patches, (PATCH, *FI_PATCHES))

    def fork(self) -> dict:
        """``forgepatch fork`` of the whole series: the sglang branch and the flashinfer one."""
        r = cli("--config", self.config, "--patches", self.patches, "fork", "--arch", ARCH, "--repo", self.repo,
                "--rev", f"v{VERSION}", "--pin", PIN, "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
