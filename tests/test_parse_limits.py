"""Parser limits (issue 28 item 4): a file the patch edits with deep nesting (libcst's native
parser segfaulted at ~2,000 levels), a huge file or a 100,000-term expression is one line
``FILE:LINE: ...`` (exit 2) within seconds, for `apply` and `apply --check`; real SGLang files
pass. Each case runs the real CLI in a subprocess (a segfault cannot take pytest down)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.badinput import COMM, MATRIX, tiny_patch, tiny_tree

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = {
    "2,000 nested brackets": ("x = " + "(" * 2000 + "1" + ")" * 2000 + "\n", 1, "nested more than"),
    "500 nested brackets": ("x = " + "[" * 500 + "]" * 500 + "\n", 1, "nested more than"),
    "100k-term expression": ("x = " + " + ".join(["1"] * 100_000) + "\n", 1, "expression too large"),
    "20 MB file": ("y = 1\n" * 3_500_000, None, "file too large"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
@pytest.mark.parametrize("mode", ["--check", "--out"])
def test_hostile_sources_are_one_line_within_seconds(tmp_path, name, mode):
    body, line, words = HOSTILE[name]
    src = tiny_tree(tmp_path / "src")
    (src / "sglang" / "srt" / "comm.py").write_text(COMM + "\n" + body)
    (tmp_path / "patches").mkdir()
    tiny_patch(tmp_path / "patches")
    (tmp_path / "matrix.toml").write_text(MATRIX)
    args = ["--check"] if mode == "--check" else ["--out", str(tmp_path / "out")]
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "forgepatch", "--config", tmp_path / "matrix.toml", "--patches",
                        tmp_path / "patches", "apply", "--arch", "sm120", "--source", src, *args],
                       capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(ROOT / "src"),
                                                                       "PATH": "/usr/bin:/bin"})
    assert time.monotonic() - start < 10, name
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, (name, r.returncode, r.stderr[-500:])
    want_line = 1 if line is None else COMM.count("\n") + 1 + line
    assert f"comm.py:{want_line}: " in lines[0] and words in lines[0], (name, lines[0])
    assert not (tmp_path / "out").exists()


def test_real_sglang_files_pass_the_limits():
    from forgepatch.patching import parselimits
    from forgepatch.sources import resolve_source

    tree = resolve_source("pypi:0.5.23")
    files = sorted(tree.package.rglob("*.py"), key=lambda p: p.stat().st_size)[-40:]  # the largest
    for path in files:
        parselimits.check(path.read_text(encoding="utf-8"), str(path))


# -- `apply --out` copies never follow a directory link out of the tree or round a loop ---------
@pytest.mark.parametrize("kind", ["loop to an ancestor", "self loop", "link out of the tree"])
def test_out_refuses_link_loops_and_escapes_in_one_line(tmp_path, kind):
    from support.badinput import one_line_error, run

    src = tiny_tree(tmp_path / "src")
    srt = src / "sglang" / "srt"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.txt").write_text("not yours")
    if kind == "loop to an ancestor":
        (srt / "loop").symlink_to("..")
    elif kind == "self loop":
        (srt / "me").symlink_to("me")
    else:
        (srt / "escape").symlink_to(outside)
    (tmp_path / "patches").mkdir()
    tiny_patch(tmp_path / "patches")
    (tmp_path / "matrix.toml").write_text(MATRIX)
    start = time.monotonic()
    res = run("--config", tmp_path / "matrix.toml", "--patches", tmp_path / "patches", "apply", "--arch", "sm120",
              "--source", src, "--out", tmp_path / "out")
    assert time.monotonic() - start < 10
    line = one_line_error(res)
    assert res.rc == 2 and ("loop" in line or "outside the tree" in line), line
    assert not (tmp_path / "out" / "sglang").exists()


def test_out_keeps_links_that_stay_inside_the_tree(tmp_path):
    from support.badinput import run

    src = tiny_tree(tmp_path / "src")
    (src / "sglang" / "srt" / "alias.py").symlink_to("utils.py")
    (tmp_path / "patches").mkdir()
    tiny_patch(tmp_path / "patches")
    (tmp_path / "matrix.toml").write_text(MATRIX)
    res = run("--config", tmp_path / "matrix.toml", "--patches", tmp_path / "patches", "apply", "--arch", "sm120",
              "--source", src, "--out", tmp_path / "out")
    assert res.rc == 0, res.err
    assert (tmp_path / "out" / "sglang" / "srt" / "alias.py").read_text() == (src / "sglang" / "srt" / "utils.py").read_text()
