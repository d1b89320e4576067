"""`forgepatch pin add/list` on a real git repo of SGLang releases and real PyPI wheels."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib

from support.forkcli import MATRIX, run_inprocess, write_matrix


def _head(repo, rev):
    return subprocess.run(["git", "-C", str(repo), "rev-parse", rev], check=True, capture_output=True, text=True).stdout.strip()


def test_pin_add_rev_records_full_sha_and_version_keeping_layout(nightlies_repo, tmp_path, capsys):
    config = write_matrix(tmp_path)
    rc, out, err = run_inprocess(capsys, "--config", config, "pin", "add", "nightly", "--rev", "v0.5.15", "--repo", nightlies_repo, "--json")
    assert rc == 0, err
    assert json.loads(out)["resolved"] == _head(nightlies_repo, "v0.5.15")
    text = config.read_text()
    pins = tomllib.loads(text)["pins"]
    # --repo is recorded: `apply --pin nightly` finds the revision wherever it runs
    assert pins["nightly"] == {"rev": _head(nightlies_repo, "v0.5.15"), "repo": str(nightlies_repo), "version": "0.5.15"}
    # the original text is intact, with the new table inserted after the last pin and
    # before the comment that introduces the next table
    block = (f'[pins.nightly]\nrev = "{_head(nightlies_repo, "v0.5.15")}"\nrepo = "{nightlies_repo}"\n'
             'version = "0.5.15"\n\n')
    assert block in text
    assert text.replace(block, "") == MATRIX
    assert text.index("[pins.nightly]") < text.index("# trailing comment block")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run([sys.executable, "-m", "forgepatch", "--config", str(config), "apply", "--arch", "sm120",
                        "--pin", "nightly", "--check"], cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1) and "not a git repository" not in r.stderr, r.stderr


def test_pin_add_pypi_records_wheel_sha256(tmp_path, capsys):
    from forgepatch.fork.pins import pypi_wheel

    config = write_matrix(tmp_path)
    rc, out, err = run_inprocess(capsys, "--config", config, "pin", "add", "rel", "--pypi", "0.5.10", "--json")
    assert rc == 0, err
    digest = hashlib.sha256(pypi_wheel("0.5.10").read_bytes()).hexdigest()
    # 0.5.10 is one pure wheel: it serves every Python and platform (per-platform pins: test_pin_platforms)
    assert tomllib.loads(config.read_text())["pins"]["rel"] == {"pypi": "0.5.10", "sha256": digest,
                                                                 "wheels": {"py3-any": digest}}
    rc, out, err = run_inprocess(capsys, "--config", config, "pin", "list", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["rel"]["resolved"] == digest and rows["v0_5_23"]["default"] is True
    assert rows["v0_5_23"]["resolved"] is None  # never resolved: shown as such


def test_pin_list_table(nightlies_repo, tmp_path, capsys):
    config = write_matrix(tmp_path)
    assert run_inprocess(capsys, "--config", config, "pin", "add", "n1", "--rev", "v0.5.20", "--repo", nightlies_repo)[0] == 0
    rc, out, _ = run_inprocess(capsys, "--config", config, "pin", "list")
    assert rc == 0 and "n1" in out and "0.5.20" in out and "v0_5_23 (default)" in out


def _bad(capsys, *args):
    rc, out, err = run_inprocess(capsys, *args)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_pin_add_bad_input(nightlies_repo, tmp_path, capsys):
    config = write_matrix(tmp_path)
    before = config.read_bytes()
    assert "already exists" in _bad(capsys, "--config", config, "pin", "add", "v0_5_23", "--pypi", "0.5.20")
    assert "unknown revision" in _bad(capsys, "--config", config, "pin", "add", "x", "--rev", "no-such-rev", "--repo", nightlies_repo)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert "not a git repository" in _bad(capsys, "--config", config, "pin", "add", "x", "--rev", "HEAD", "--repo", plain)
    assert "exactly one" in _bad(capsys, "--config", config, "pin", "add", "x")
    assert "invalid pin name" in _bad(capsys, "--config", config, "pin", "add", "a/b", "--pypi", "0.5.20")
    assert config.read_bytes() == before


def test_pin_add_refuses_shipped_matrix(tmp_path, capsys, monkeypatch):
    from forgepatch.paths import SHIPPED_MATRIX

    monkeypatch.chdir(tmp_path)  # no ./matrix.toml here
    assert "does not exist" in _bad(capsys, "pin", "add", "x", "--pypi", "0.5.20")
    assert "shipped" in _bad(capsys, "--config", SHIPPED_MATRIX, "pin", "add", "x", "--pypi", "0.5.20")
