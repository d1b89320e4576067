"""Bad input: one line on stderr, exit 2, no traceback, nothing written. Drift: exit 1."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from forgepatch.sources import pypi_tree
from tests.support.cli import assert_one_line_error, forgepatch


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory) -> Path:
    """A writable copy of the 0.5.15 tree (`<dir>/sglang`)."""
    root = tmp_path_factory.mktemp("rel")
    shutil.copytree(pypi_tree("0.5.15").package, root / "sglang")
    return root


def _copy(release_dir: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "tree"
    shutil.copytree(release_dir, dest)
    return dest


def test_unknown_arch():
    assert_one_line_error(forgepatch("apply", "--arch", "sm999", "--check"), 2, "--arch", "sm999")


def test_missing_arch_flag():
    assert_one_line_error(forgepatch("apply", "--check"), 2, "--arch")


def test_nonexistent_version(tmp_path):
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.999", "--out", tmp_path / "o")
    assert_one_line_error(run, 2, "0.5.999", "does not exist")
    assert not (tmp_path / "o").exists()


def test_directory_without_sglang(tmp_path):
    (tmp_path / "empty").mkdir()
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--source", tmp_path / "empty", "--check"),
                          2, "no SGLang package")


def test_malformed_matrix(tmp_path):
    cfg = tmp_path / "matrix.toml"
    cfg.write_text('default_pin = "a"\n[pins.a]\npypi = "0.5.23"\n\n[arches.sm120]\npatches = ["foo"]\n')
    run = forgepatch("--config", cfg, "apply", "--arch", "sm120", "--check")
    assert_one_line_error(run, 2, f"{cfg}:6: arches.sm120.patches: unknown patch 'foo'")
    cfg.write_text('default_pin = "a"\n[pins.a]\npypi = "0.5.23"\nrev = "abc"\n')
    assert_one_line_error(forgepatch("--config", cfg, "apply", "--arch", "sm120", "--check"),
                          2, f"{cfg}:2: pins.a:", "exactly one of")
    cfg.write_text('default_pin = "a"\n[pins.a]\npypi = "0.5.23"\n[profiles.x]\nflags = ["ep 8"]\n')
    assert_one_line_error(forgepatch("--config", cfg, "apply", "--arch", "sm120", "--check"),
                          2, f"{cfg}:5: profiles.x.flags:", "malformed flag group")
    cfg.write_text('default_pin = "a"\n[pins.a\n')
    assert_one_line_error(forgepatch("--config", cfg, "apply", "--arch", "sm120", "--check"),
                          2, f"{cfg}:2: invalid TOML")


def test_patch_file_with_syntax_error(tmp_path, release_dir):
    pdir = tmp_path / "patches"
    pdir.mkdir()
    (pdir / "broken.py").write_text("PATCH = {\n  'id': 'broken',\n  oops\n")
    cfg = tmp_path / "matrix.toml"
    cfg.write_text('default_pin = "a"\n[pins.a]\npypi = "0.5.23"\n[arches.sm120]\npatches = ["broken"]\n')
    run = forgepatch("--config", cfg, "--patches", pdir, "apply", "--arch", "sm120", "--source", release_dir, "--check")
    assert_one_line_error(run, 2, "broken.py:", "syntax error")
    (pdir / "broken.py").unlink()
    (pdir / "broken.toml").write_text('id = "broken"\nsummary = "x"\narches = ["sm120"]\n\n[[sites]]\nname = "s"\nfunctions = 3\n')
    run = forgepatch("--config", cfg, "--patches", pdir, "apply", "--arch", "sm120", "--source", release_dir, "--check")
    assert_one_line_error(run, 2, "broken.toml:7: sites[0].functions: expected a list of strings")


def test_unparseable_target_file_writes_nothing(tmp_path, release_dir):
    tree = _copy(release_dir, tmp_path)
    target = tree / "sglang/srt/layers/communicator.py"
    target.write_text(target.read_text() + "\ndef broken(:\n")
    before = {p: p.read_bytes() for p in tree.rglob("*.py")}
    run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--in-place")
    assert_one_line_error(run, 2, "communicator.py", "cannot parse")
    assert {p: p.read_bytes() for p in tree.rglob("*.py")} == before


def test_drift_when_the_gated_function_is_deleted(tmp_path, release_dir):
    tree = _copy(release_dir, tmp_path)
    comm = tree / "sglang/srt/layers/communicator.py"
    text = comm.read_text()
    start = text.index("def apply_flashinfer_allreduce_fusion(")
    end = text.index("\ndef ", start + 10)
    comm.write_text(text[:start] + text[end + 1 :])
    before = {p: p.read_bytes() for p in tree.rglob("*.py")}
    run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--in-place")
    assert run.rc == 1, run.err
    msg = run.err.strip()
    assert "patch sm120-flashinfer-allreduce-fusion: site runtime-fusion-gate not found" in msg
    assert "candidates: sglang.srt.layers.communicator." in msg and "(srt/layers/communicator.py:" in msg
    assert "nothing written" in msg and "Traceback" not in run.err
    # the other two sites were fine, yet nothing at all was written
    assert {p: p.read_bytes() for p in tree.rglob("*.py")} == before
    js = forgepatch("apply", "--arch", "sm120", "--source", tree, "--check", "--json")
    site = next(s for s in js.json()["patches"][0]["sites"] if s["site"] == "runtime-fusion-gate")
    assert site["status"] == "drift" and 1 <= len(site["candidates"]) <= 5


def test_in_place_needs_a_directory_source():
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--in-place"),
                          2, "--in-place")


def test_debug_shows_the_traceback(tmp_path):
    (tmp_path / "empty").mkdir()
    run = forgepatch("--debug", "apply", "--arch", "sm120", "--source", tmp_path / "empty", "--check")
    assert run.rc != 0 and "Traceback" in run.err
