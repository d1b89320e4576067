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


# -- item 1: progress on a terminal only -------------------------------------------------
def _run_on_terminal(*args: str, env=None) -> tuple[int, bytes, str]:
    """Run the CLI with stderr on a pseudo-terminal (120x40) and stdout on a pipe."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "forgepatch", *args], stdout=subprocess.PIPE, stderr=slave,
                            env={**os.environ, "TERM": "xterm", **(env or {})})
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out = proc.stdout.read().decode()
    os.close(master)
    return proc.wait(), seen, out


def test_progress_on_a_terminal_and_never_in_a_pipe_or_json():
    args = ("apply", "--arch", "sm120", "--source", "pypi:0.5.10", "--check")
    rc, seen, out = _run_on_terminal(*args)
    assert rc == 1, seen  # would change files
    assert b"patching pypi:0.5.10 for sm120" in seen  # the progress line, drawn on the terminal
    assert "\x1b" not in out and "would change 2 file(s)" in out  # stdout is a pipe: plain text
    rc, seen, out = _run_on_terminal(*args, "--json")
    assert rc == 1 and b"patching" not in seen and b"\x1b" not in seen
    assert json.loads(out)["forgepatch_version"]
    piped = forgepatch(*args)
    assert piped.rc == 1 and piped.err == "" and "\x1b" not in piped.out
    # a failure takes the progress line down before its message: the message is the last line
    import re

    rc, seen, _ = _run_on_terminal("apply", "--arch", "sm120", "--source", "pypi:0.5.999", "--check")
    assert rc == 2 and b"downloading sglang==0.5.999 from PyPI" in seen
    last = re.split(rb"\r|\n", seen.rstrip(b"\r\n"))[-1]  # what the terminal's last line shows
    assert re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", last) == b"forgepatch: error: --source: sglang==0.5.999 does not exist on PyPI"


# -- item 3: natural inputs ----------------------------------------------------------------
def test_arch_spellings_are_read_one_way_in_every_command(tmp_path):
    want = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.10", "--check", "--json")
    for spelling in ("sm_120", "SM120", "12.0"):
        run = forgepatch("apply", "--arch", spelling, "--source", "pypi:0.5.10", "--check", "--json")
        assert run.rc == want.rc == 1
        assert run.json()["arch"] == "sm120"
        assert run.json()["patches"] == want.json()["patches"]
        assert run.err.strip() == f"forgepatch: note: --arch {spelling!r} read as sm120"
    # an unknown arch: the same one-line refusal, with a suggestion, whatever the command
    for cmd in (["apply", "--check"], ["lint"], ["build"], ["fork", "--repo", tmp_path, "--rev", "x"],
                ["drift", "--repo", tmp_path], ["audit", "--dir", tmp_path], ["smoke", "--runner", "local"],
                ["gates", "--source", "pypi:0.5.10"], ["release", "--dry-run"], ["bake", "--out", tmp_path / "b.json"]):
        run = forgepatch(*cmd, "--arch", "sm_12O")
        assert_one_line_error(run, 2, "--arch: unknown arch 'sm_12O'", "did you mean sm120 or sm121?")


def test_source_accepts_a_pin_name_and_hints_pypi(tmp_path):
    bare = forgepatch("apply", "--arch", "sm120", "--source", "0.5.15", "--check", cwd=tmp_path)
    assert_one_line_error(bare, 2, "--source: '0.5.15'", "write pypi:0.5.15")
    unknown = forgepatch("apply", "--arch", "sm120", "--source", "v0.5.99", "--check", cwd=tmp_path)
    assert_one_line_error(unknown, 2, "write pypi:0.5.99", "v0.5.23")  # names the pins there are
    by_pin_name = forgepatch("apply", "--arch", "sm120", "--source", "v0.5.20", "--check", "--json", cwd=tmp_path)
    by_pypi = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.20", "--check", "--json", cwd=tmp_path)
    by_pin = forgepatch("apply", "--arch", "sm120", "--pin", "v0.5.20", "--check", "--json", cwd=tmp_path)
    assert by_pin_name.rc == by_pypi.rc == by_pin.rc == 1
    assert by_pin_name.json()["source"] == by_pin.json()["source"] == "pypi:0.5.20"
    assert by_pin_name.json()["patches"] == by_pypi.json()["patches"] == by_pin.json()["patches"]
    lint = forgepatch("lint", "--arch", "sm120", "--pin", "v0.5.20", "--json", cwd=tmp_path)
    assert lint.rc == 0 and lint.json()["source"] == "pypi:0.5.20"
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--pin", "v0.5.20", "--source", "pypi:0.5.20",
                                     "--check", cwd=tmp_path), 2, "--pin and --source")
    assert_one_line_error(forgepatch("lint", "--arch", "sm120", "--pin", "nope", cwd=tmp_path), 2, "--pin: unknown pin 'nope'")
    # a directory of that name wins over the pin (a path is what it always was)
    (tmp_path / "v0.5.20").mkdir()
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--source", "v0.5.20", "--check", cwd=tmp_path),
                          2, "no SGLang package")


# -- item 6: output polish -----------------------------------------------------------------
def test_drift_groups_the_same_finding_across_revisions(nightly_clone, tmp_path, monkeypatch, capsys):
    from support.forkcli import run_inprocess, write_matrix
    from support.nightlies import PACKAGE_DIR, commit_on, show, without_function

    from forgepatch.paths import cache_dir

    wheels = cache_dir("wheels")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "wheels").symlink_to(wheels, target_is_directory=True)
    monkeypatch.setenv("FORGEPATCH_CACHE_DIR", str(tmp_path / "cache"))
    repo = nightly_clone
    comm = f"{PACKAGE_DIR}/srt/layers/communicator.py"
    first = commit_on(repo, "v0.5.20", {comm: without_function(show(repo, "v0.5.20", comm), "apply_flashinfer_allreduce_fusion")},
                      "refactor: drop apply_flashinfer_allreduce_fusion")
    second = commit_on(repo, first, {f"{PACKAGE_DIR}/srt/unrelated.py": b"X = 1\n"}, "an unrelated change")
    config = write_matrix(tmp_path)
    rc, out, err = run_inprocess(capsys, "--config", config, "drift", "--arch", "sm120", "--repo", repo,
                                 "--revs", f"v0.5.20,{first},{second}")
    assert rc == 1, err
    lines = [ln for ln in out.splitlines() if ln.startswith("drift ")]
    assert len(lines) == 1, out  # one finding, two revisions
    assert lines[0].startswith(f"drift {first[:12]}..{second[:12]} (2 revisions): sm120-flashinfer-allreduce-fusion "
                               "site runtime-fusion-gate"), lines[0]
    rc, md, _ = run_inprocess(capsys, "--config", config, "drift", "--arch", "sm120", "--repo", repo,
                              "--revs", f"{first},v0.5.20,{second}", "--markdown")
    found = [ln for ln in md.splitlines() if ln.startswith("- ") and "runtime-fusion-gate" in ln]
    assert len(found) == 1 and found[0].startswith(f"- {first[:12]}, {second[:12]} (2 revisions): "), found


def test_piped_output_is_not_wrapped(tmp_path):
    import os
    import re

    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.10", "--check",
                     env={**os.environ, "COLUMNS": "40"})
    first = run.out.splitlines()[0]
    assert re.fullmatch(r"forgepatch apply --arch sm120  source pypi:0\.5\.10  version 0\.5\.10  patchset [0-9a-f]{16}", first)
    assert any(len(line) > 100 for line in run.out.splitlines())  # long site lines stay whole
    assert "\x1b" not in run.out


def test_smoke_table_prints_brackets_as_they_are(tmp_path, docker_client, base_image):
    """A GPU job on an engine without a GPU runtime: docker's own error names the requested
    capabilities in brackets; the live line and the table print it as the JSON has it."""
    import os

    matrix = tmp_path / "matrix.toml"
    matrix.write_text('default_pin = "p"\n[pins.p]\npypi = "0.5.23"\n[arches.sm120]\nprofiles = ["cmd"]\n'
                      '[profiles.cmd]\ncommand = "python3 -c pass"\ngpus = 1\n')
    args = ("--config", matrix, "smoke", "--image", base_image, "--logs", tmp_path / "logs")
    env = {**os.environ, "FORGEPATCH_GPUS": "0"}
    doc = forgepatch(*args, "--json", env=env)
    summary = doc.json()["jobs"][0]["summary"]
    assert doc.rc == 1 and "capabilities: [[" in summary, summary
    table = forgepatch(*args, env=env)
    assert table.rc == 1
    live, row = table.out.splitlines()[0], [ln for ln in table.out.splitlines() if ln.startswith("| sm120 ")][0]
    assert live.endswith(f"sm120-p-cmd  {summary}"), live
    assert row == f"| sm120 | p | **ERROR**: {summary} |", row


def test_triage_refuses_an_empty_log(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert_one_line_error(forgepatch("triage", empty), 2, f"{empty}: empty log")
    empty.write_text("\n  \n")
    assert_one_line_error(forgepatch("triage", empty), 2, "empty log")
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "forgepatch", "triage", "-"], input="", capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip() == "forgepatch: error: stdin: empty log, nothing to triage"


def test_a_bad_revision_is_reported_under_its_own_flag(nightlies_repo, tmp_path):
    run = forgepatch("drift", "--arch", "sm120", "--repo", nightlies_repo, "--revs", "v0.5.20,nope")
    assert_one_line_error(run, 2, "--revs: unknown revision 'nope'")
    run = forgepatch("drift", "--arch", "sm120", "--repo", nightlies_repo, "--since", "nope")
    assert_one_line_error(run, 2, "--since: unknown revision 'nope'")
    run = forgepatch("fork", "--arch", "sm120", "--repo", nightlies_repo, "--rev", "nope")
    assert_one_line_error(run, 2, "--rev: unknown revision 'nope'")


def test_pin_add_accepts_what_its_help_says(tmp_path):
    from forgepatch.fork.pins import NAME_RULE

    help_text = " ".join(forgepatch("pin", "add", "-h").out.split())
    assert "a letter or digit, then letters, digits, '.', '_' or '-'" in help_text and "exactly one of --rev or --pypi" in help_text
    cfg = tmp_path / "matrix.toml"
    cfg.write_text('default_pin = "a"\n\n[pins.a]\npypi = "0.5.23"\n')
    ok = forgepatch("--config", cfg, "pin", "add", "v0.5.10", "--pypi", "0.5.10", "--json")
    assert ok.rc == 0, ok.err
    assert ok.json()["name"] == "v0.5.10" and len(ok.json()["resolved"]) == 64
    assert_one_line_error(forgepatch("--config", cfg, "pin", "add", ".x", "--pypi", "0.5.10"), 2, NAME_RULE)
    assert_one_line_error(forgepatch("--config", cfg, "pin", "add", "x", "--pypi", "0.5.10", "--repo", tmp_path),
                          2, "--repo: only with --rev")
    assert_one_line_error(forgepatch("--config", cfg, "pin", "add", "x"), 2, "exactly one of --rev REV or --pypi VERSION")


# -- item 8: conventions --------------------------------------------------------------------
def test_version_help_alias_exit_codes_and_json_version():
    import forgepatch as fp

    assert forgepatch("--version").out == f"forgepatch {fp.__version__}\n"
    for args in (["-h"], ["apply", "-h"], ["pin", "add", "-h"], ["results", "merge", "-h"]):
        run = forgepatch(*args)
        assert run.rc == 0 and run.out.startswith("Usage: forgepatch"), (args, run.err)
        assert "Exit codes:" in run.out and "2  bad input" in run.out, args
    assert "--show-completion" in forgepatch("-h").out
    import os
    import subprocess
    import sys

    # typer detects the shell from the parent process: ask from a real bash, as a user does (under
    # pytest-xdist the worker's ancestry need not hold a shell); "; exit" keeps bash from exec'ing
    completion = subprocess.run(["bash", "-c", '"$@"; exit $?', "bash", sys.executable, "-m", "forgepatch",
                                 "--show-completion"], capture_output=True, text=True, timeout=120)
    assert completion.returncode == 0, completion.stderr
    assert "complete" in completion.stdout and "_FORGEPATCH_COMPLETE" in completion.stdout

    def complete(words: str) -> list[str]:  # what the installed bash script asks the CLI
        env = {**os.environ, "_FORGEPATCH_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - 1)}
        return forgepatch(env=env).out.split()

    assert complete("forgepatch ap") == ["apply"]
    assert complete("forgepatch apply --arch sm12") == ["sm120", "sm121"]
    doc = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.10", "--check", "--json").json()
    assert doc["forgepatch_version"] == fp.__version__


def test_no_color_is_respected_on_a_terminal():
    import re

    _, seen, _ = _run_on_terminal("apply", "--arch", "sm120", "--source", "pypi:0.5.10", "--check")
    assert re.search(rb"\x1b\[(3\d|9\d)(;\d+)*m", seen)  # colour by default ...
    _, seen, _ = _run_on_terminal("apply", "--arch", "sm120", "--source", "pypi:0.5.10", "--check", env={"NO_COLOR": "1"})
    assert b"patching pypi:0.5.10 for sm120" in seen
    assert not re.search(rb"\x1b\[[\d;]*(3\d|9\d)(;\d+)*m", seen)  # ... none with NO_COLOR


def test_source_pin_name_selects_the_pin_for_build():
    from forgepatch.config import load_matrix
    from forgepatch.errors import BadInput
    from forgepatch.images.prepare import resolve_target
    from forgepatch.paths import SHIPPED_MATRIX

    matrix = load_matrix(SHIPPED_MATRIX)
    target = resolve_target(matrix, "sm120", source="v0.5.20", base_image="base:1")
    assert (target.pin, target.source) == ("v0.5.20", "pypi:0.5.20")
    with pytest.raises(BadInput, match="--source 'v0.5.20' is a pin other than --pin 'v0.5.23'"):
        resolve_target(matrix, "sm120", source="v0.5.20", pin="v0.5.23", base_image="base:1")


# -- the README's first command, as a new user runs it ----------------------------------------
def test_readme_first_command_in_a_fresh_venv(tmp_path):
    """A copy of the checkout, a fresh venv (dependencies from the package index), the README's
    first command as written: it patches the default pin and says which files changed, where,
    and what to do next. Slow (a real `pip install`): the one test of its kind."""
    import os
    import re
    import shutil
    import subprocess
    import venv
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    block = re.search(r"```bash\n(.*?)\n```", (root / "README.md").read_text(encoding="utf-8"), re.S).group(1)
    first = block.splitlines()[0]
    assert first.startswith("pip install") and "forgepatch apply --arch sm120" in first, first
    listed = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    checkout = tmp_path / "forgepatch"
    for rel in filter(None, listed):
        if (root / rel).is_file():
            (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, checkout / rel)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    env = {**os.environ, "VIRTUAL_ENV": str(env_dir), "PATH": f"{env_dir / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    run = subprocess.run(["bash", "-c", first], cwd=checkout, env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    changed = re.findall(r"^  (forgepatch-out/sm120/sglang/\S+\.py)$", out, re.M)
    assert len(changed) == 3, out  # 0.5.23: the fusion gate, the auto-enable, the backend check
    for rel in changed:
        assert (checkout / rel).is_file()
    assert re.search(r"^wrote forgepatch-out/sm120/sglang: a complete copy of the package \(\d+ files\), 3 of them changed:$",
                     out, re.M), out
    nxt = out.split("\nnext:\n", 1)[1]
    assert "forgepatch apply --arch sm120 --diff" in nxt and "forgepatch build --arch sm120" in nxt


def test_out_from_git_holds_the_non_py_files_of_the_revision(tmp_path, wheel_files):
    """A git source: the package's other files come from the commit's objects (not the
    working tree, which has moved on)."""
    import shutil
    import subprocess

    repo = tmp_path / "sglang-repo"
    pkg = repo / "python" / "sglang"
    shutil.copytree(pypi_tree(VERSION).package, pkg)
    with zipfile.ZipFile(pypi_wheel(VERSION)) as zf:
        extra = sorted(n for n in wheel_files if not n.endswith(".py"))[:40]
        for name in extra:
            (repo / "python" / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / "python" / name).write_bytes(zf.read(name))

    def git(*args):
        subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "release")
    (pkg / "later.json").write_text("{}")  # in the working tree only: not part of the revision
    out = tmp_path / "o"
    run = forgepatch("apply", "--arch", "sm120", "--source", f"git:{repo}@HEAD", "--out", out)
    assert run.rc == 0, run.err
    tracked = subprocess.run(["git", "-C", repo, "ls-files", "python/sglang"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert _files(out / "sglang") == {t.removeprefix("python/sglang/") for t in tracked}
    for name in extra:
        assert (out / name).read_bytes() == (repo / "python" / name).read_bytes()


def test_in_place_names_the_files_it_changed(tmp_path):
    import shutil

    shutil.copytree(pypi_tree("0.5.10").package, tmp_path / "src" / "sglang")
    run = forgepatch("apply", "--arch", "sm120", "--source", tmp_path / "src", "--in-place")
    assert run.rc == 0, run.err
    pkg = (tmp_path / "src" / "sglang").resolve()
    lines = run.out.splitlines()
    at = lines.index(f"patched {pkg} in place: 2 file(s) changed")
    assert lines[at + 1:at + 3] == [f"  {pkg}/srt/layers/communicator.py", f"  {pkg}/srt/server_args.py"]
    assert f"forgepatch apply --arch sm120 --source {tmp_path / 'src'} --check" in run.out
    again = forgepatch("apply", "--arch", "sm120", "--source", tmp_path / "src", "--check")
    assert again.rc == 0 and "already patched" in again.out
