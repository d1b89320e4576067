"""The cache verified like pip's hash-checking mode, and made once across concurrent runs
(issue 27 item 4, issue 28 item 1). Real SGLang release wheels (0.5.2, 0.5.3 from the warm
cache) served by a local index (a pip ``--find-links`` directory; no network) into an EMPTY
private cache (``FORGEPATCH_CACHE_DIR``): the shared cache is only read."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forgepatch.errors import BadInput
from forgepatch.paths import cache_dir

VERSION, OTHER = "0.5.2", "0.5.3"
ROOT = Path(__file__).resolve().parents[1]
ARGS = ("apply", "--check", "--arch", "sm120", "--source", f"pypi:{VERSION}")


def _shared_wheel(version: str) -> Path:
    shared = Path(os.environ.get("FORGEPATCH_SHARED_CACHE", Path.home() / ".cache" / "forgepatch"))
    found = sorted((shared / "wheels" / version).glob("sglang-*.whl"))
    if not found:
        pytest.fail(f"the warm wheel cache has no sglang {version} (tests/run.sh fills it)")
    return found[0]


@pytest.fixture
def world(tmp_path, monkeypatch):
    index = tmp_path / "index"
    index.mkdir()
    shutil.copy(_shared_wheel(VERSION), index)
    cache = tmp_path / "cache"
    env = {"FORGEPATCH_CACHE_DIR": str(cache), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index),
           "PIP_EXTRA_INDEX_URL": "", "PIP_INDEX_URL": "", "PIP_CONSTRAINT": "", "PIP_CONFIG_FILE": os.devnull}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return {"index": index, "cache": cache, "env": {**os.environ, **env, "PYTHONPATH": str(ROOT / "src")},
            "tmp": tmp_path}


def _cli(world, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "forgepatch", *args], capture_output=True, text=True,
                          env=world["env"], cwd=world["tmp"], timeout=timeout)


def _debris(cache: Path) -> list[str]:
    return [str(p) for p in cache.rglob(".tmp-*")]


def _damage(kind: str, wheel: Path) -> None:
    data = wheel.read_bytes()
    if kind == "truncated":
        wheel.write_bytes(data[: len(data) // 2])
    elif kind == "zero-bytes":
        wheel.write_bytes(b"")
    elif kind == "not-a-zip":
        wheel.write_bytes(b"<html>502 Bad Gateway</html>\n" * 100)
    elif kind == "other-release":
        wheel.write_bytes(_shared_wheel(OTHER).read_bytes())
    elif kind == "swapped-bytes":  # same size, a few bytes changed inside a member
        mid = len(data) // 2
        wheel.write_bytes(data[:mid] + bytes(b ^ 0xFF for b in data[mid:mid + 8]) + data[mid + 8:])
    elif kind == "other-release-rerecorded":  # the record rewritten too: caught by the wheel's contents
        other = _shared_wheel(OTHER).read_bytes()
        wheel.write_bytes(other)
        import hashlib

        wheel.with_name(wheel.name + ".sha256").write_text(hashlib.sha256(other).hexdigest() + "\n")
    else:
        raise AssertionError(kind)


KINDS = ["truncated", "zero-bytes", "not-a-zip", "other-release", "swapped-bytes", "other-release-rerecorded"]


def _from_index(world):
    """The downloader reading the local index directly (pip's own run is in the tests below;
    this saves its ~4 s start per damage kind): the same file pip would fetch."""
    def download(version: str, into: Path) -> Path:
        src = next(world["index"].glob(f"sglang-{version}-*.whl"))
        return Path(shutil.copy(src, into))
    return download


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_cached_wheel_is_downloaded_again(world, kind, capsys):
    from forgepatch.wheelcache import file_sha256, verified_wheel

    good = verified_wheel(VERSION, download=_from_index(world))
    want = file_sha256(good)
    assert want == file_sha256(_shared_wheel(VERSION))
    _damage(kind, good)
    again = verified_wheel(VERSION, download=_from_index(world))
    assert again == good and file_sha256(again) == want
    err = capsys.readouterr().err
    assert f"cached wheel {good}" in err and "downloading it again" in err, err
    assert _debris(world["cache"]) == []


@pytest.mark.parametrize("kind", ["other-release"])
def test_a_damaged_wheel_offline_is_one_line_and_the_cli_recovers_online(world, kind):
    from forgepatch.wheelcache import verified_wheel

    wheel = verified_wheel(VERSION, download=_from_index(world))
    warm = _cli(world, *ARGS)
    assert warm.returncode in (0, 1), warm.stderr
    _damage(kind, wheel)
    hidden = world["index"].with_name("index-away")
    world["index"].rename(hidden)  # offline: the index is gone
    r = _cli(world, *ARGS)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("forgepatch: error")]
    assert r.returncode == 2 and len(lines) == 1 and f"sglang=={VERSION}" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    hidden.rename(world["index"])
    r = _cli(world, *ARGS)
    assert (r.returncode, r.stdout) == (warm.returncode, warm.stdout), r.stderr


def test_the_pins_sha256_is_checked_against_the_bytes(world):
    from forgepatch.wheelcache import file_sha256, verified_wheel

    good = verified_wheel(VERSION, download=_from_index(world))
    assert verified_wheel(VERSION, file_sha256(good)) == good
    with pytest.raises(BadInput, match=r"downloaded wheel of sglang==0\.5\.2 .* has sha256 .*expected 0000"):
        verified_wheel(VERSION, "0" * 64, download=_from_index(world))  # the cached one does not match: removed, the download neither
    assert _debris(world["cache"]) == []


def test_sigkill_during_download_or_unpack_leaves_nothing_that_matters(world):
    """Cold runs killed at a spread of moments (during pip's download, the hashing, the
    unpack): the next run gives the warm verdict and leaves no temporary names."""
    for delay in (0.4, 1.0, 1.8):
        shutil.rmtree(world["cache"], ignore_errors=True)
        proc = subprocess.Popen([sys.executable, "-m", "forgepatch", *ARGS], env=world["env"], cwd=world["tmp"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)  # pip's child too
        proc.wait()
        r = _cli(world, *ARGS)
        assert r.returncode in (0, 1) and "error" not in r.stderr, (delay, r.stderr)
        assert _debris(world["cache"]) == [], delay


def test_six_parallel_cold_runs_give_the_warm_verdict(world):
    procs = [subprocess.Popen([sys.executable, "-m", "forgepatch", *ARGS], env=world["env"], cwd=world["tmp"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    cold = [(p.returncode, out, err) for p in procs for out, err in [p.communicate(timeout=300)]]
    warm = _cli(world, *ARGS)
    assert warm.returncode in (0, 1), warm.stderr
    for rc, out, err in cold:
        assert (rc, out) == (warm.returncode, warm.stdout), err
        assert "error" not in err, err
    assert len(list((world["cache"] / "wheels" / VERSION).glob("*.whl"))) == 1
    assert len([p for p in (world["cache"] / "trees").iterdir() if not p.name.startswith(".")]) == 1
    assert _debris(world["cache"]) == []


def test_an_incomplete_tree_of_an_older_run_is_replaced_not_read(world):
    from forgepatch.sources import pypi_tree

    tree = pypi_tree(VERSION)
    root = tree.package.parent
    (root / ".complete").unlink()
    (tree.package / "srt" / "utils.py").write_text("half written")
    again = pypi_tree(VERSION)
    assert again.package == tree.package and (again.package / "srt" / "utils.py").read_text() != "half written"
    assert _debris(world["cache"]) == [] and cache_dir("trees") == world["cache"] / "trees"
