"""Identity checks at the seams before the image: `fork` refuses a pin whose recorded identity
is not REV's, `build` refuses a source that is not the pin's code — on a real git repo of
SGLang releases and real PyPI wheels; each message names both identities, in one line."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from forgepatch.combination import Upstream
from support.forkcli import run_inprocess


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def pins_repo(tmp_path, nightly_clone, capsys):
    """A matrix with a PyPI pin (recorded with its real wheel's sha256 by `pin add`) and a git
    pin (recorded as its full SHA), the shipped patches, and the nightlies repo."""
    from forgepatch.paths import SHIPPED_PATCHES

    config = tmp_path / "matrix.toml"
    config.write_text('default_pin = "p23"\n[pins.p23]\npypi = "0.5.23"\n'
                      '[arches.sm120]\npatches = ["sm120-flashinfer-allreduce-fusion"]\nbase_image = "none:here"\n')
    patches = tmp_path / "patches"
    shutil.copytree(SHIPPED_PATCHES, patches)
    assert run_inprocess(capsys, "--config", config, "pin", "add", "v0.5.15", "--pypi", "0.5.15")[0] == 0
    assert run_inprocess(capsys, "--config", config, "pin", "add", "g15", "--rev", "v0.5.15", "--repo", nightly_clone)[0] == 0
    return config, patches, nightly_clone


def fork(capsys, pins_repo, *args):
    config, patches, repo = pins_repo
    return run_inprocess(capsys, "--config", config, "--patches", patches, "fork", "--arch", "sm120", "--repo", repo,
                         "--json", *args)


def test_fork_refuses_a_pypi_pin_of_another_release(pins_repo, capsys):
    from forgepatch.config import load_matrix

    config, _, repo = pins_repo
    wheel_sha = load_matrix(config).pins["v0.5.15"].sha256
    other = git(repo, "rev-parse", "v0.5.20")
    rc, out, err = fork(capsys, pins_repo, "--rev", "v0.5.20", "--pin", "v0.5.15")
    assert rc == 2 and out == ""
    line = one_line(err)
    assert f"'v0.5.15' is PyPI sglang 0.5.15 (wheel sha256 {wheel_sha[:12]})" in line
    assert f"--rev 'v0.5.20' is git {other[:12]} (version 0.5.20)" in line
    assert git(repo, "for-each-ref", "refs/heads/forgepatch") == ""  # no branch made

    rc, out, err = fork(capsys, pins_repo, "--rev", "v0.5.15", "--pin", "v0.5.15")  # the release's own tag
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["branch"] == "forgepatch/sm120/v0.5.15" and doc["version"] == "0.5.15"


def test_fork_refuses_a_git_pin_of_another_commit(pins_repo, capsys):
    _, _, repo = pins_repo
    pinned, other = git(repo, "rev-parse", "v0.5.15"), git(repo, "rev-parse", "v0.5.20")
    rc, out, err = fork(capsys, pins_repo, "--rev", "v0.5.20", "--pin", "g15")
    assert rc == 2
    line = one_line(err)
    assert f"'g15' is git {pinned[:12]} (version 0.5.15)" in line and f"is git {other[:12]} (version 0.5.20)" in line
    rc, out, err = fork(capsys, pins_repo, "--pin", "g15")  # the pin's own commit
    assert rc == 0 and json.loads(out)["branch"] == "forgepatch/sm120/g15", err


def test_build_refuses_a_source_of_another_release_before_any_engine_call(pins_repo, capsys, monkeypatch, tmp_path):
    config, patches, _ = pins_repo
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")  # the check comes first
    rc, out, err = run_inprocess(capsys, "--config", config, "--patches", patches, "build", "--arch", "sm120",
                                 "--pin", "v0.5.15", "--source", "pypi:0.5.20")
    assert rc == 2
    line = one_line(err)
    assert "pypi:0.5.20 is PyPI sglang 0.5.20" in line and "pin 'v0.5.15' is PyPI sglang 0.5.15" in line


def test_prepare_refuses_a_git_source_of_another_commit(pins_repo, tmp_path):
    from forgepatch.config import load_matrix
    from forgepatch.patching.library import as_library
    from forgepatch.errors import BadInput
    from forgepatch.images.prepare import prepare, resolve_target

    config, patches, repo = pins_repo
    matrix = load_matrix(config, as_library(patches))
    pinned, other = git(repo, "rev-parse", "v0.5.15"), git(repo, "rev-parse", "v0.5.20")
    target = resolve_target(matrix, "sm120", pin="g15", source=f"git:{repo}@v0.5.20")
    with pytest.raises(BadInput) as err:
        prepare(target, matrix, patches, tmp_path / "ctx")
    assert f"is git {other[:12]} (version 0.5.20)" in str(err.value)
    assert f"pin 'g15' is git {pinned[:12]} (version 0.5.15)" in str(err.value)
    ok = prepare(resolve_target(matrix, "sm120", pin="g15", source=f"git:{repo}@{pinned[:10]}"), matrix, patches,
                 tmp_path / "ctx2")
    labels = ok.spec.identity_labels()
    assert labels["forgepatch.upstream"] == f"git:{pinned}" and labels["org.opencontainers.image.version"] == "0.5.15"
    assert labels["forgepatch.engine"].startswith("0.1.0+")


@pytest.mark.parametrize("code, pin, ok", [
    (Upstream("pypi", "0.5.23", "a" * 64), Upstream("pypi", "0.5.23", "a" * 64), True),
    (Upstream("pypi", "0.5.23", "a" * 64), Upstream("pypi", "0.5.23", None), True),  # pin without a recorded wheel
    (Upstream("pypi", "0.5.23", "a" * 64), Upstream("pypi", "0.5.23", "b" * 64), False),  # another wheel
    (Upstream("pypi", "0.5.20", "a" * 64), Upstream("pypi", "0.5.23", None), False),
    (Upstream("git", "0.5.23", "c" * 40), Upstream("pypi", "0.5.23", "a" * 64), True),  # a branch from the tag
    (Upstream("git", "0.5.24.dev3", "c" * 40), Upstream("pypi", "0.5.23", None), False),
    (Upstream("git", "0.5.23", "c" * 40), Upstream("git", None, "c" * 40), True),
    (Upstream("git", "0.5.23", "c" * 40), Upstream("git", None, "d" * 40), False),
    (Upstream("pypi", "0.5.23", "a" * 64), Upstream("git", "0.5.23", "c" * 40), False),  # a git pin is a commit
    (Upstream("dir", "0.5.23"), Upstream("pypi", "0.5.23"), False),  # a directory has no identity
])
def test_upstream_identity_rules(code, pin, ok):
    assert (code.mismatch(pin) is None) is ok
    assert Upstream.from_labels(code.to_labels()) == code
