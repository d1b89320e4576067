"""The first hour of a new user (issue 15): what `apply --out` writes and refuses, what it says
next, natural inputs, conventions. Real release wheels, the real CLI in a subprocess."""

from __future__ import annotations

import json
import zipfile

import pytest

from forgepatch.sources import pypi_tree, pypi_wheel
from tests.support.cli import assert_one_line_error, forgepatch

VERSION = "0.5.15"  # 3,745 package files, 1,173 of them not .py


def _files(root):
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def wheel_files():
    with zipfile.ZipFile(pypi_wheel(VERSION)) as zf:
        return {i.filename: i.file_size for i in zf.infolist() if i.filename.startswith("sglang/") and not i.is_dir()}


# -- item 2: --out -----------------------------------------------------------------------
def test_out_is_the_complete_package_and_says_what_changed(tmp_path, wheel_files):
    out = tmp_path / "o"
    run = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:{VERSION}", "--out", out, cwd=tmp_path)
    assert run.rc == 0, run.err
    written = _files(out / "sglang")
    assert {f"sglang/{rel}" for rel in written} == set(wheel_files)  # .py and the rest: importable as shipped
    assert any(not f.endswith(".py") for f in written)
    record = json.loads((out / ".forgepatch-out").read_text())
    assert set(record["files"]) == written and record["arch"] == "sm120"
    changed = record["changed"]
    assert "srt/layers/flashinfer_comm_fusion.py" in changed
    pristine = pypi_tree(VERSION).package
    for rel in written:  # exactly the recorded files differ from the release
        if rel.endswith(".py"):
            same = (out / "sglang" / rel).read_bytes() == (pristine / rel).read_bytes()
            assert same == (rel not in changed), rel
    # the output names every changed file where it is, and what to do next
    lines = run.out.splitlines()
    assert f"wrote o/sglang: a complete copy of the package ({len(written)} files), {len(changed)} of them changed:" in lines
    for rel in changed:
        assert f"  o/sglang/{rel}" in lines
    assert "next:" in lines
    nxt = run.out.split("next:", 1)[1]
    for cmd in (f"forgepatch apply --arch sm120 --source pypi:{VERSION} --diff", "--in-place",
                "forgepatch fork --arch sm120", f"forgepatch build --arch sm120 --source pypi:{VERSION}"):
        assert cmd in nxt, cmd
    # --json says the same
    again = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:{VERSION}", "--out", out, "--json").json()
    assert again["files_written"] == len(written) and again["written"] == str((out / "sglang").resolve())


def test_out_refuses_a_directory_it_did_not_write(tmp_path):
    out = tmp_path / "mine"
    (out / "sglang" / "srt").mkdir(parents=True)
    (out / "sglang" / "srt" / "config.json").write_text("{}")
    args = ("apply", "--arch", "sm120", "--source", f"pypi:{VERSION}", "--out", out)
    assert_one_line_error(forgepatch(*args), 2, f"--out: {out} is not empty", "--force")
    assert (out / "sglang" / "srt" / "config.json").read_text() == "{}"
    assert _files(out) == {"sglang/srt/config.json"}  # nothing written
    (out / "notes.txt").write_text("keep")
    run = forgepatch(*args, "--force")
    assert run.rc == 0, run.err
    assert not (out / "sglang" / "srt" / "config.json").exists()  # --force replaced sglang/ ...
    assert (out / "notes.txt").read_text() == "keep"  # ... and nothing else
    assert forgepatch(*args).rc == 0  # now it is forgepatch's: a re-run needs no --force


def test_out_refuses_a_file_added_to_its_own_output(tmp_path):
    out = tmp_path / "o"
    args = ("apply", "--arch", "sm120", "--source", f"pypi:{VERSION}", "--out", out)
    assert forgepatch(*args).rc == 0
    cache = out / "sglang" / "srt" / "__pycache__"  # bytecode of an import: not the user's, no refusal
    cache.mkdir()
    (cache / "x.cpython-311.pyc").write_bytes(b"x")
    assert forgepatch(*args).rc == 0
    added = out / "sglang" / "srt" / "config.json"
    added.write_text("{}")
    assert_one_line_error(forgepatch(*args), 2, f"--out: {added} was added or changed", "--force")
    assert added.read_text() == "{}"
    edited = out / "sglang" / "version.py"
    added.unlink()
    edited.write_text(edited.read_text() + "# mine\n")
    assert_one_line_error(forgepatch(*args), 2, f"--out: {edited} was added or changed")
    assert edited.read_text().endswith("# mine\n")
    file_out = tmp_path / "file"
    file_out.write_text("x")
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--source", f"pypi:{VERSION}", "--out", file_out),
                          2, "is not a directory")
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--source", f"pypi:{VERSION}", "--check", "--force"),
                          2, "--force")
