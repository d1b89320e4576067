"""Sources: PyPI release cache, git revisions (without touching the checkout), directories."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from forgepatch.errors import BadInput
from forgepatch.sources import dir_tree, git_tree, pypi_tree, pypi_wheel, wheel_sha256
from tests.support.cli import assert_one_line_error, forgepatch


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def fork_repo(tmp_path_factory):
    """A real git repo holding SGLang 0.5.10 then 0.5.15 under python/sglang/, tagged like
    upstream and, like a real checkout, without the generated ``_version.py``."""
    repo = tmp_path_factory.mktemp("fork")
    git("init", "-q", "-b", "main", cwd=repo)
    git("config", "user.email", "t@example.com", cwd=repo)
    git("config", "user.name", "t", cwd=repo)
    revs = {}
    for v in ("0.5.10", "0.5.15"):
        shutil.rmtree(repo / "python", ignore_errors=True)
        shutil.copytree(pypi_tree(v).package, repo / "python" / "sglang")
        (repo / "python/sglang/_version.py").unlink(missing_ok=True)
        git("add", "-A", cwd=repo)
        git("commit", "-qm", f"sglang {v}", cwd=repo)
        git("tag", f"v{v}", cwd=repo)
        revs[v] = git("rev-parse", "HEAD", cwd=repo)
    return repo, revs


def test_pypi_cache_is_keyed_by_version_and_sha(tmp_path):
    wheel = pypi_wheel("0.5.3")
    assert wheel.parent.name == "0.5.3"
    tree = pypi_tree("0.5.3")
    assert tree.revision == wheel_sha256(wheel)
    assert tree.package.parent.name.startswith("0.5.3-" + tree.revision[:16])
    assert all(p.suffix == ".py" for p in tree.package.rglob("*") if p.is_file())
    assert tree.version == "0.5.3"


def test_git_source_exports_a_revision_without_touching_the_checkout(fork_repo, tmp_path):
    repo, revs = fork_repo
    (repo / "python/sglang/srt/layers/communicator.py").write_text("dirty")  # a dirty worktree
    status = git("status", "--porcelain", cwd=repo)
    head = git("rev-parse", "HEAD", cwd=repo)
    tree = git_tree(f"{repo}@{revs['0.5.10']}")
    assert tree.revision == revs["0.5.10"] and tree.version == "0.5.10"  # from the tag
    assert git_tree(f"{repo}@v0.5.15").version == "0.5.15"
    comm = (tree.package / "srt/layers/communicator.py").read_text()
    assert "def apply_flashinfer_allreduce_fusion(" in comm
    assert git("status", "--porcelain", cwd=repo) == status and git("rev-parse", "HEAD", cwd=repo) == head
    run = forgepatch("apply", "--arch", "sm120", "--source", f"git:{repo}@{revs['0.5.10'][:10]}", "--check", "--json")
    assert run.rc == 1 and run.json()["changed_files"] == ["srt/layers/communicator.py", "srt/server_args.py"]
    git("checkout", "--", ".", cwd=repo)


def test_git_source_errors(fork_repo, tmp_path):
    repo, _ = fork_repo
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--source", f"git:{repo}@nosuchrev", "--check"),
                          2, "no revision 'nosuchrev'")
    (tmp_path / "plain").mkdir()
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--source", f"git:{tmp_path / 'plain'}@HEAD", "--check"),
                          2, "not a git repository")
    empty = tmp_path / "empty"
    empty.mkdir()
    git("init", "-q", cwd=empty)
    (empty / "README").write_text("x")
    git("add", "-A", cwd=empty)
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x", cwd=empty)
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--source", f"git:{empty}@HEAD", "--check"),
                          2, "holds no SGLang package")


def test_dir_source_finds_python_sglang(fork_repo):
    repo, _ = fork_repo
    assert dir_tree(repo).package == (repo / "python" / "sglang").resolve()
    with pytest.raises(BadInput):
        dir_tree(repo / "python" / "sglang" / "srt")
