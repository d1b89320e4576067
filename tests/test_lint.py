"""`forgepatch lint`: gates of the same feature that still reject the arch after patching."""

from __future__ import annotations

import shutil

import pytest

from forgepatch.paths import SHIPPED_PATCHES
from tests.support.cli import forgepatch


@pytest.mark.parametrize("version", ["0.5.15", "0.5.23"])
def test_complete_patch_leaves_no_rejecting_gate(version):
    run = forgepatch("lint", "--arch", "sm120", "--source", f"pypi:{version}", "--json")
    assert run.rc == 0, run.out + run.err
    assert run.json()["findings"] == []


@pytest.mark.parametrize("version,line", [("0.5.15", 49), ("0.5.23", 48)])
def test_lint_catches_the_missing_backend_check(tmp_path, version, line):
    """Remove the backend-check site: the auto-enable still fires on sm120, and start-up
    would die in _resolve_backend — lint must say so before any GPU is used."""
    pdir = tmp_path / "patches"
    shutil.copytree(SHIPPED_PATCHES, pdir)
    toml = pdir / "sm120-flashinfer-allreduce-fusion.toml"
    text = toml.read_text()
    start = text.index('[[sites]]\nname = "backend-check"')
    toml.write_text(text[:start] + text[text.index("[[examples]]"):])
    run = forgepatch("--patches", pdir, "lint", "--arch", "sm120", "--source", f"pypi:{version}", "--json")
    assert run.rc == 1
    findings = run.json()["findings"]
    assert [(f["file"], f["line"], f["function"]) for f in findings] == [
        ("srt/layers/flashinfer_comm_fusion.py", line, "_resolve_backend")]
    assert "rejects sm120" in findings[0]["reason"]
