"""A fork's own patches (issue 15 item 4): ./patches ADDS to the shipped patches (and may
override one by id), `patch list` says where each patch comes from, a patch listed under an
arch it does not declare is a config error, and `init` scaffolds a matrix that runs as is.
All on the real 0.5.23 release wheel."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES
from tests.support.cli import assert_one_line_error, forgepatch

SM120 = "sm120-flashinfer-allreduce-fusion"
SM103 = "sm103-ep-cuda-graph-guard"

MATRIX = f"""\
default_pin = "v0.5.23"

[pins."v0.5.23"]
pypi = "0.5.23"

[arches.sm103]
patches = ["{SM103}"]

[arches.sm120]
patches = ["mine-sm120-backend", "{SM120}"]
"""


def _own_patch(dest: Path) -> Path:
    """A patch of the fork's own: the shipped sm120 patch's backend-check site alone, as a new id."""
    text = (SHIPPED_PATCHES / f"{SM120}.toml").read_text()
    text = text.replace(f'id = "{SM120}"', 'id = "mine-sm120-backend"')
    head, _, _ = text.partition("[[sites]]")
    site = text[text.index('name = "backend-check"'):].split("\n\n")[0]
    out = dest / "mine-sm120-backend.toml"
    # and the shipped patch's declared exception in that function (the mnnvl gate), without
    # which the per-arch evaluation finds the patch incomplete on its own
    ignore = text[text.index("[[ignore]]"):]
    out.write_text(head + "[[sites]]\n" + site + "\n\n" + ignore)
    return out


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    (tmp_path / "matrix.toml").write_text(MATRIX)
    (tmp_path / "patches").mkdir()
    _own_patch(tmp_path / "patches")
    return tmp_path


def test_user_patches_add_to_the_shipped_ones(fork):
    listed = forgepatch("patch", "list", "--json", cwd=fork)
    assert listed.rc == 0, listed.err
    origins = {d["id"]: (d["origin"], d["file"]) for d in listed.json()}
    assert origins == {
        SM120: ("shipped", str(SHIPPED_PATCHES / f"{SM120}.toml")),
        SM103: ("shipped", str(SHIPPED_PATCHES / f"{SM103}.py")),
        "mine-sm120-backend": ("user", str(Path("patches") / "mine-sm120-backend.toml")),
    }
    table = forgepatch("patch", "list", cwd=fork)
    assert table.rc == 0, table.err
    header, *rows = table.out.splitlines()
    assert header.split()[:2] == ["ID", "ORIGIN"]
    assert any(r.split()[:2] == ["mine-sm120-backend", "user"] for r in rows), table.out
    assert any(r.split()[:2] == [SM103, "shipped"] for r in rows), table.out
    # the shipped sm103 patch is found although ./patches exists and lacks it (it used to be
    # "unknown patch 'sm103-ep-cuda-graph-guard'")
    sm103 = forgepatch("apply", "--arch", "sm103", "--check", "--json", cwd=fork)
    assert sm103.rc == 1, sm103.err  # not patched yet: exit 1, nothing written
    assert [p["patch"] for p in sm103.json()["patches"]] == [SM103]
    assert sm103.json()["changed_files"] == ["srt/arg_groups/validation_hook.py"]
    # the user patch runs in the sm120 series, before the shipped one, and is the one that
    # widens the backend check of the real release
    sm120 = forgepatch("apply", "--arch", "sm120", "--check", "--json", cwd=fork)
    assert sm120.rc == 1, sm120.err
    doc = sm120.json()
    assert [p["patch"] for p in doc["patches"]] == ["mine-sm120-backend", SM120]
    mine = doc["patches"][0]
    assert mine["files"] == ["srt/layers/flashinfer_comm_fusion.py"], mine
    # a user patch with no lock yet: its sites apply, and nobody accepted its edits (review)
    sites = {site["site"]: site for site in mine["sites"]}
    assert mine["status"] == "review" and sites.pop("edit-lock")["detail"].startswith("no lock ("), mine
    assert sites["backend-check"]["status"] == "applied", sites
    # the shipped patch finds that gate widened by the user patch of the same run: that is
    # already-applied, not "absorbed upstream" (upstream 0.5.23 still rejects sm120 there)
    shipped = {site["site"]: site["status"] for site in doc["patches"][1]["sites"]}
    assert shipped["backend-check"] == "already-applied", shipped


def test_a_user_patch_overrides_the_shipped_one_of_the_same_id(fork):
    # the user's copy of the sm120 patch requires a site that 0.5.23 does not have: if the
    # user's file is the one used, apply reports drift (exit 1) on that site
    text = (SHIPPED_PATCHES / f"{SM120}.toml").read_text()
    text = text.replace('summary = "Enable FlashInfer all-reduce fusion on SM120/SM121"',
                        'summary = "our fork\'s variant"')
    text += '\n[[sites]]\nname = "our-extra-site"\nfunctions = ["no_such_function_in_sglang"]\n'
    (fork / "patches" / f"{SM120}.toml").write_text(text)
    listed = forgepatch("patch", "list", "--json", cwd=fork)
    assert listed.rc == 0, listed.err
    entry = next(d for d in listed.json() if d["id"] == SM120)
    assert entry["origin"] == "user (overrides shipped)" and entry["summary"] == "our fork's variant"
    assert entry["file"] == str(Path("patches") / f"{SM120}.toml")
    run = forgepatch("apply", "--arch", "sm120", "--check", "--json", cwd=fork)
    assert run.rc == 1, run.err
    ours = next(p for p in run.json()["patches"] if p["patch"] == SM120)
    sites = {s["site"]: s["status"] for s in ours["sites"]}
    assert sites["our-extra-site"] == "drift", sites
    # --patches DIR is the user directory too (same semantics as ./patches)
    other = fork / "elsewhere"
    other.mkdir()
    again = forgepatch("--patches", fork / "patches", "patch", "list", "--json", cwd=other)
    assert again.rc == 0, again.err
    assert {d["id"]: d["origin"] for d in again.json()} == {
        SM120: "user (overrides shipped)", SM103: "shipped", "mine-sm120-backend": "user"}


def test_unknown_patch_names_where_it_was_looked_for(fork):
    (fork / "matrix.toml").write_text(MATRIX.replace('"mine-sm120-backend"', '"typo-patch"'))
    run = forgepatch("apply", "--arch", "sm120", "--check", cwd=fork)
    assert_one_line_error(run, 2, "matrix.toml:10: arches.sm120.patches: unknown patch 'typo-patch'",
                          "typo-patch.toml", "patches or the shipped patches", SM103)


def test_a_patch_listed_under_an_arch_it_does_not_declare_is_a_config_error(fork):
    (fork / "matrix.toml").write_text(MATRIX.replace(f'patches = ["{SM103}"]', f'patches = ["{SM120}"]'))
    for args in (["apply", "--arch", "sm103", "--check"], ["lint", "--arch", "sm103"]):
        run = forgepatch(*args, cwd=fork)
        assert_one_line_error(run, 2, "matrix.toml:7: arches.sm103.patches:",
                              f"patch '{SM120}' does not declare sm103", "sm120, sm121")
    # a user patch too, with its file named
    (fork / "matrix.toml").write_text(MATRIX.replace(f'patches = ["{SM103}"]', '"patches" = ["mine-sm120-backend"]'))
    run = forgepatch("apply", "--arch", "sm103", "--check", cwd=fork)
    assert_one_line_error(run, 2, "matrix.toml:7: arches.sm103.patches:", "mine-sm120-backend.toml")


def test_init_scaffolds_the_shipped_matrix_that_runs_as_is(tmp_path):
    from forgepatch.arch import ARCHES
    from forgepatch.config import load_matrix

    run = forgepatch("init", "--json", cwd=tmp_path)
    assert run.rc == 0, run.err
    assert sorted(Path(p).name for p in run.json()["written"]) == ["Dockerfile", "README.md", "matrix.toml"]
    assert (tmp_path / "matrix.toml").read_bytes() == SHIPPED_MATRIX.read_bytes()
    matrix = load_matrix(tmp_path / "matrix.toml")
    assert matrix.default_pin == "v0.5.23"  # the pin name the README uses
    assert set(matrix.arches) == set(ARCHES)  # every shipped arch, sm103 included
    assert matrix.arches["sm103"].patches == [SM103]
    # patches/ is for the fork's own patches; the shipped ones are used without a copy
    assert [p.name for p in (tmp_path / "patches").iterdir()] == ["README.md"]
    assert "ADD to the patches shipped" in (tmp_path / "patches" / "README.md").read_text().replace("\n", " ")
    for arch in ("sm103", "sm120", "sm121"):
        check = forgepatch("apply", "--arch", arch, "--check", "--json", cwd=tmp_path)
        assert check.rc == 1, (arch, check.err)  # runs as is: the release needs patching (exit 1)
        assert check.json()["status"] == "changed" and check.json()["source"] == "pypi:0.5.23"
    for arch in ("sm90", "sm100"):  # no patches: the release is already what they need
        check = forgepatch("apply", "--arch", arch, "--check", cwd=tmp_path)
        assert check.rc == 0, (arch, check.err)
    listed = forgepatch("patch", "list", cwd=tmp_path)
    assert re.search(rf"^{SM103}\s+shipped\s", listed.out, re.M), listed.out
