"""`forgepatch release` checks the combination against the pin's identity, for PyPI pins too
(real release wheels, a real git repo with the fork branch, real images, real smoke results):
an image and a branch made from another release, or from another wheel of the same version,
are refused with messages naming both identities; a release records the toolchain the smoke
jobs ran on in the tag message and the ledger entry."""

from __future__ import annotations

import json

import pytest

from support.release_world import TAG, World, git, reasons

pytestmark = pytest.mark.docker


def repin(w: World, line: str) -> None:
    """Redefine pin p23 after the branch and the image were made (a matrix edit)."""
    text = w.config.read_text()
    assert text.count('pypi = "0.5.23"') == 1
    w.config.write_text(text.replace('pypi = "0.5.23"', line))


def wheel_sha() -> str:
    from forgepatch.sources import pypi_wheel, wheel_sha256

    return wheel_sha256(pypi_wheel("0.5.23"))


def test_refuses_an_image_and_a_branch_of_another_release(world):
    w = world
    w.build()
    results = w.smoke()
    head_upstream = git(w.repo, "rev-parse", "v0.5.23")
    repin(w, 'pypi = "0.5.20"')
    r = w.release(results, "--json")
    assert r.returncode == 1, r.stderr
    got = reasons(r)
    assert sorted(got) == ["branch-upstream", "image-upstream"], got
    (image_msg,) = got["image-upstream"]
    assert f"was built from PyPI sglang 0.5.23 (wheel sha256 {wheel_sha()[:12]})" in image_msg
    assert "but pin p23 is PyPI sglang 0.5.20" in image_msg
    (branch_msg,) = got["branch-upstream"]
    assert f"was made from git {head_upstream[:12]} (version 0.5.23)" in branch_msg
    assert "but pin p23 is PyPI sglang 0.5.20" in branch_msg
    assert w.tags() == [] and w.ledger_bytes() is None


def test_refuses_an_image_of_another_wheel_of_the_same_version(world):
    w = world
    w.build()
    results = w.smoke()
    repin(w, 'pypi = "0.5.23"\nsha256 = "' + "0" * 64 + '"')
    r = w.release(results, "--json")
    assert r.returncode == 1, r.stderr
    got = reasons(r)
    assert list(got) == ["image-upstream"], got  # the branch is the release's tag: its version matches
    (msg,) = got["image-upstream"]
    assert f"PyPI sglang 0.5.23 (wheel sha256 {wheel_sha()[:12]})" in msg
    assert "pin p23 is PyPI sglang 0.5.23 (wheel sha256 000000000000)" in msg


def test_release_records_the_combination_and_the_toolchain(world):
    w = world
    repin(w, f'pypi = "0.5.23"\nsha256 = "{wheel_sha()}"')  # the pin as `pin add --pypi` records it
    image = w.build()
    results = w.smoke()
    jobs = json.loads(results.read_text())["jobs"]
    assert all(j["toolchain"]["sglang"] == "0.5.23" and j["upstream"] == "pypi:0.5.23" for j in jobs), jobs
    r = w.release(results, "--json")
    assert r.returncode == 0, r.stderr
    message = git(w.repo, "tag", "-l", "--format=%(contents)", TAG)
    toolchain = next(line for line in message.splitlines() if line.startswith("toolchain: "))
    assert "SGLang 0.5.23" in toolchain and "Python 3." in toolchain
    assert f"image upstream PyPI sglang 0.5.23 (wheel sha256 {wheel_sha()[:12]}), engine 0.1.0+" in message
    (entry,) = json.loads(w.ledger.read_text())["releases"]
    assert entry["toolchain"]["sglang"] == "0.5.23" and entry["toolchain"]["python"].startswith("3.")
    assert all(p["toolchain"] == entry["toolchain"] for p in entry["profiles"].values())
    assert entry["image"]["id"] == image and entry["image"]["upstream"] == "pypi:0.5.23"
    assert entry["image"]["upstream_revision"] == wheel_sha() and entry["image"]["engine"].startswith("0.1.0+")
    assert w.verify().returncode == 0
