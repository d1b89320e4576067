"""Fixit-style examples of every shipped patch, run through `forgepatch patch test`."""

from __future__ import annotations

import shutil

from forgepatch.paths import SHIPPED_PATCHES
from forgepatch.patching.patchset import load_patches, patch_files
from forgepatch.patching.service import run_examples
from tests.support.cli import forgepatch


def test_every_shipped_example_passes():
    patches = load_patches(SHIPPED_PATCHES, list(patch_files(SHIPPED_PATCHES)))
    results = run_examples(patches)
    assert len(results) >= 6
    assert [r for r in results if r[2]] == []


def test_patch_test_fails_on_a_wrong_example(tmp_path):
    pdir = tmp_path / "patches"
    shutil.copytree(SHIPPED_PATCHES, pdir)
    toml = pdir / "sm120-flashinfer-allreduce-fusion.toml"
    toml.write_text(toml.read_text().replace(
        "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)",
        "(_is_sm90_supported or _is_sm120_supported)", 1))
    run = forgepatch("--patches", pdir, "patch", "test")
    assert run.rc == 1
    assert "FAIL sm120-flashinfer-allreduce-fusion: constant idiom" in run.out
    assert forgepatch("patch", "test").rc == 0


def test_patch_list_json():
    docs = forgepatch("patch", "list", "--json").json()
    ids = {d["id"]: d for d in docs}
    assert ids["sm120-flashinfer-allreduce-fusion"]["arches"] == ["sm120", "sm121"]
    assert ids["sm103-ep-cuda-graph-guard"]["sites"] == ["argument-check"]
