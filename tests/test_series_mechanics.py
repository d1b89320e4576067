"""Series mechanics: every patch's status even when one drifts, `apply --patch`, and
`patch test --accept` / its summary line / `--json`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from tests.support.cli import assert_one_line_error, forgepatch

MATRIX = '''default_pin = "v0.5.23"

[upstream]
name = "sglang"
repo = "https://github.com/sgl-project/sglang"
package_dir = "python/sglang"

[pins."v0.5.23"]
pypi = "0.5.23"

[arches.sm120]
patches = ["gone-site", "sm120-flashinfer-allreduce-fusion"]
'''

GONE = '''id = "gone-site"
summary = "A site upstream removed"
arches = ["sm120"]

[[sites]]
name = "renamed"
functions = ["no_such_function_upstream"]
markers = ["enable_flashinfer_allreduce_fusion"]
'''


def _project(tmp_path: Path) -> Path:
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "gone-site.toml").write_text(GONE)
    (tmp_path / "matrix.toml").write_text(MATRIX)
    return tmp_path


def test_every_patch_is_shown_when_one_drifts_and_nothing_is_written(tmp_path):
    project = _project(tmp_path)
    out = project / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--out", out, cwd=project)
    assert run.rc == 1 and not out.exists()
    assert "gone-site  drift" in run.out
    assert "sm120-flashinfer-allreduce-fusion  would apply" in run.out  # the healthy one, with its sites
    assert "backend-check" in run.out
    doc = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--check", "--json", cwd=project).json()
    assert [(p["patch"], p["status"]) for p in doc["patches"]] == [
        ("gone-site", "drift"), ("sm120-flashinfer-allreduce-fusion", "applied")]


def test_apply_patch_runs_part_of_the_series(tmp_path):
    project = _project(tmp_path)
    out = project / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--patch",
                     "sm120-flashinfer-allreduce-fusion", "--out", out, "--json", cwd=project)
    assert run.rc == 0, run.err
    doc = run.json()
    assert [p["patch"] for p in doc["patches"]] == ["sm120-flashinfer-allreduce-fusion"]
    assert (out / "sglang" / "srt" / "arg_groups" / "overrides.py").is_file()
    bad = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--patch", "nope", "--check", cwd=project)
    assert_one_line_error(bad, 2, "--patch nope", "gone-site, sm120-flashinfer-allreduce-fusion")


EXAMPLE_PATCH = """id = "mine"
summary = "mine"
arches = ["sm120"]

[[sites]]
name = "s"
functions = ["fuse"]
markers = ["fusion"]

# the example below expects the wrong thing (its author forgot the new import)
[[examples]]
name = "widen"
path = "srt/x.py"
context = { "srt/utils.py" = "def is_sm90_supported(): ...\\ndef is_sm100_supported(): ...\\ndef is_sm120_supported(): ...\\n" }
before = '''
from sglang.srt.utils import is_sm90_supported, is_sm100_supported


def fuse(fusion):
    return fusion and (is_sm90_supported() or is_sm100_supported())
'''
after = '''
from sglang.srt.utils import is_sm90_supported, is_sm100_supported


def fuse(fusion):
    return fusion and (is_sm90_supported() or is_sm100_supported() or is_sm120_supported())
'''
"""


def test_patch_test_accept_writes_the_output_as_after_and_shows_the_diff(tmp_path):
    pdir = tmp_path / "patches"
    pdir.mkdir()
    path = pdir / "mine.toml"
    path.write_text(EXAMPLE_PATCH)
    run = forgepatch("--patches", pdir, "patch", "test", "mine", cwd=tmp_path)
    assert run.rc == 1 and run.out.rstrip().splitlines()[-1] == "0 passed, 1 failed"
    doc = json.loads(forgepatch("--patches", pdir, "patch", "test", "mine", "--json", cwd=tmp_path).out)
    assert (doc["passed"], doc["failed"]) == (0, 1) and doc["examples"][0]["status"] == "failed"

    run = forgepatch("--patches", pdir, "patch", "test", "mine", "--accept", cwd=tmp_path)
    assert run.rc == 0, run.out
    assert "+from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported" in run.out
    assert run.out.rstrip().splitlines()[-1] == "1 passed, 0 failed (1 accepted)"
    text = path.read_text()
    assert "# the example below expects the wrong thing" in text  # comments and layout kept
    after = tomllib.loads(text)["examples"][0]["after"]
    assert after.startswith("from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported\n")
    again = forgepatch("--patches", pdir, "patch", "test", "mine", cwd=tmp_path)
    assert again.rc == 0 and again.out.rstrip().splitlines()[-1] == "1 passed, 0 failed"
