"""`forgepatch init` scaffolds a fork checkout and never overwrites a file."""

from __future__ import annotations

import json

import pytest

from support.forkcli import run_inprocess


@pytest.fixture(autouse=True)
def _shipped_dockerfile():
    from forgepatch.paths import SHIPPED_DOCKERFILE

    if not SHIPPED_DOCKERFILE.is_file():  # the images issue ships it; init copies it
        pytest.skip(f"no shipped Dockerfile in this tree yet ({SHIPPED_DOCKERFILE})")


def test_init_scaffolds_a_valid_matrix_patches_and_dockerfile(nightly_clone, capsys, monkeypatch):
    from forgepatch.config import load_matrix
    from forgepatch.paths import SHIPPED_DOCKERFILE, SHIPPED_MATRIX

    repo = nightly_clone
    rc, out, err = run_inprocess(capsys, "init", "--dir", repo, "--json")
    assert rc == 0, err
    written = {str(p) for p in json.loads(out)["written"]}
    assert written == {str(repo / "matrix.toml"), str(repo / "patches" / "README.md"), str(repo / "dockerfiles" / "Dockerfile")}
    assert (repo / "matrix.toml").read_bytes() == SHIPPED_MATRIX.read_bytes()  # one matrix, no template copy
    assert (repo / "dockerfiles" / "Dockerfile").read_bytes() == SHIPPED_DOCKERFILE.read_bytes()
    text = (repo / "matrix.toml").read_text()
    from forgepatch.patching.library import PatchLibrary

    matrix = load_matrix(repo / "matrix.toml", PatchLibrary(repo / "patches"))
    assert matrix.arches["sm120"].patches == ["sm120-flashinfer-allreduce-fusion"]
    for table in ("[upstream]", "[pins.", "[arches.", "[profiles.", "[smoke]", "[release]"):
        line = text.index(table)
        assert text[:line].rstrip().splitlines()[-1].startswith("#"), f"{table} has no explaining comment"
    # the scaffold is what the other commands read from the checkout
    monkeypatch.chdir(repo)
    rc, out, err = run_inprocess(capsys, "pin", "add", "nightly", "--rev", "v0.5.20", "--json")
    assert rc == 0, err
    rc, out, err = run_inprocess(capsys, "fork", "--arch", "sm120", "--repo", ".", "--pin", "nightly", "--json")
    assert rc == 0, err
    assert json.loads(out)["branch"] == "forgepatch/sm120/nightly"


def test_init_refuses_to_overwrite(tmp_path, capsys):
    (tmp_path / "matrix.toml").write_text("# mine\n")
    rc, out, err = run_inprocess(capsys, "init", "--dir", tmp_path)
    assert rc == 2 and "refusing to overwrite" in err and "matrix.toml" in err
    assert len(err.strip().splitlines()) == 1
    assert (tmp_path / "matrix.toml").read_text() == "# mine\n"
    assert not (tmp_path / "patches").exists() and not (tmp_path / "dockerfiles").exists()
    other = tmp_path / "other"
    other.mkdir()
    assert run_inprocess(capsys, "init", "--dir", other)[0] == 0
    before = {p: p.read_bytes() for p in other.rglob("*") if p.is_file()}
    rc, out, err = run_inprocess(capsys, "init", "--dir", other)
    assert rc == 2 and "patches/README.md" in err and "dockerfiles/Dockerfile" in err
    assert {p: p.read_bytes() for p in other.rglob("*") if p.is_file()} == before
