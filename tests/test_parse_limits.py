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


# -- a crash the limits miss: the worker dies, the CLI says so in one line (infra/supervisor) -----
LIFTED = ("import sys; from forgepatch.patching import parselimits; parselimits.MAX_NESTING = 10 ** 9; "
          "from forgepatch.cli import entry; sys.argv[0] = 'forgepatch'; entry()")


@pytest.mark.parametrize("mode", ["--check", "--out"])
def test_a_native_parser_crash_past_the_limits_is_one_line_naming_the_file(tmp_path, mode):
    """The real console entry with the nesting limit lifted (nothing else changed): libcst's
    native parser really segfaults on 5,000 nested brackets; the worker dies of it and the CLI
    prints one line naming the file, exit 2, nothing written."""
    src = tiny_tree(tmp_path / "src")
    (src / "sglang" / "srt" / "comm.py").write_text(COMM + "\nx = " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    (tmp_path / "patches").mkdir()
    tiny_patch(tmp_path / "patches")
    (tmp_path / "matrix.toml").write_text(MATRIX)
    args = ["--check"] if mode == "--check" else ["--out", str(tmp_path / "out")]
    r = subprocess.run([sys.executable, "-c", LIFTED, "--config", tmp_path / "matrix.toml", "--patches",
                        tmp_path / "patches", "apply", "--arch", "sm120", "--source", src, *args],
                       capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(ROOT / "src"),
                                                                       "PATH": "/usr/bin:/bin"})
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr[-800:])
    assert "comm.py: forgepatch crashed (SIGSEGV) in native code while reading this file" in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_the_worker_ends_as_the_cli_would(tmp_path):
    """Exit codes pass through; a worker killed by a signal that is not a crash kills the CLI
    the same way (what strace's kill injection and `timeout` callers see); a SIGTERM sent to
    the CLI's pid reaches the worker, which ends by it."""
    import os
    import signal

    ok = subprocess.run([sys.executable, "-m", "forgepatch", "--version"], capture_output=True, text=True)
    assert ok.returncode == 0
    bad = subprocess.run([sys.executable, "-m", "forgepatch", "apply", "--arch", "sm999"], capture_output=True,
                         text=True, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    src = tiny_tree(tmp_path / "src")
    code = ("import os, signal, sys, time; from forgepatch.infra import supervisor\n"
            "def work():\n    print(os.getpid(), flush=True)\n    time.sleep(30)\n    return 0\n"
            "sys.exit(supervisor.run(work))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    worker = int(proc.stdout.readline())
    assert worker != proc.pid
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == -signal.SIGTERM
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)
    assert src.is_dir()


@pytest.mark.parametrize("op", [" + ", " and "])
def test_the_longest_chain_the_limit_admits_is_edited_and_written(tmp_path, op):
    """A chain of MAX_CHAIN operators (libcst's codegen recursed out at ~500 from a shallow
    stack: a 2,000-term sum gave "input nested too deeply" with no file) goes through the
    whole `apply --out` (parse, edit, codegen, compile) in the real CLI; one more is one line
    naming file:line."""
    from forgepatch.patching.parselimits import MAX_CHAIN

    for n, ok in ((MAX_CHAIN + 1, True), (MAX_CHAIN + 2, False)):  # n terms: n - 1 operators
        src = tiny_tree(tmp_path / f"src{n}")
        tail = "\nx = (" + op.join(["a"] * n) + ")\n"
        (src / "sglang" / "srt" / "comm.py").write_text(COMM + tail)
        (tmp_path / "patches").mkdir(exist_ok=True)
        tiny_patch(tmp_path / "patches")
        (tmp_path / "matrix.toml").write_text(MATRIX)
        out = tmp_path / f"out{n}"
        r = subprocess.run([sys.executable, "-m", "forgepatch", "--config", tmp_path / "matrix.toml", "--patches",
                            tmp_path / "patches", "apply", "--arch", "sm120", "--source", src, "--out", out],
                           capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(ROOT / "src"),
                                                                           "PATH": "/usr/bin:/bin"})
        if ok:
            assert r.returncode == 0, r.stderr[-600:]
            got = (out / "sglang" / "srt" / "comm.py").read_text()
            assert got.endswith(tail) and "sm120" in got
        else:
            lines = r.stderr.strip().splitlines()
            assert r.returncode == 2 and len(lines) == 1, r.stderr[-600:]
            assert f"comm.py:{COMM.count(chr(10)) + 2}: expression too large" in lines[0], lines[0]
            assert not out.exists()
