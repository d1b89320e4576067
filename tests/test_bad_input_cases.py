"""Each bad input of issue 16's table: exit 2, one line naming the file:line (or the flag),
no traceback, nothing written. (``test_fuzz_input.py`` generates hundreds more.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.badinput import MATRIX, PATCH_TOML, one_line_error, run, tiny_patch, tiny_tree
from tests.support.cli import assert_one_line_error, forgepatch


@pytest.fixture
def ws(tmp_path):
    """A tiny source tree, a patch dir with the tiny patch, and a matrix for them."""
    tiny_tree(tmp_path / "src")
    tiny_patch(tmp_path / "patches")
    (tmp_path / "matrix.toml").write_text(MATRIX)
    return tmp_path


def _apply(ws: Path, *extra: object):
    return run("--config", ws / "matrix.toml", "--patches", ws / "patches", "apply", "--arch", "sm120",
               "--source", ws / "src", "--out", ws / "out", *extra)


def _refused(ws: Path, *needles: str, where: str | None = None) -> str:
    """Apply must fail with one line holding ``needles`` (and ``where``:LINE:), writing nothing."""
    res = _apply(ws)
    assert res.rc == 2, (res.rc, res.err, res.out)
    line = one_line_error(res)
    for n in needles:
        assert n in line, (n, line)
    if where is not None:
        assert re.search(re.escape(where) + r":\d+: ", line), line
    assert not (ws / "out").exists()
    return line


def _line_no(line: str, where: str) -> int:
    return int(re.search(re.escape(where) + r":(\d+): ", line).group(1))


def test_the_unmutated_inputs_apply(ws):
    assert _apply(ws).rc == 0
    assert "is_sm120_supported()" in (ws / "out" / "sglang" / "srt" / "comm.py").read_text()


# -- matrix.toml -----------------------------------------------------------------------------
def test_matrix_not_utf8(ws):
    (ws / "matrix.toml").write_bytes(MATRIX.encode().replace(b"[smoke]", b"# caf\xe9\n[smoke]"))
    line = _refused(ws, "not UTF-8", "0xE9", where="matrix.toml")
    assert _line_no(line, "matrix.toml") == MATRIX.splitlines().index("[smoke]") + 1


def test_matrix_deep_nesting(ws):
    (ws / "matrix.toml").write_text(MATRIX + "x = " + "[" * 3000 + "]" * 3000 + "\n")
    line = _refused(ws, "nested", where="matrix.toml")
    assert _line_no(line, "matrix.toml") == len(MATRIX.splitlines()) + 1
    (ws / "matrix.toml").write_text(MATRIX + "[arches.sm120.build_args]\nx = " + "{a=" * 40 + "1" + "}" * 40 + "\n")
    _refused(ws, "arches.sm120.build_args", "nested", where="matrix.toml")


@pytest.mark.parametrize("pin, needle", [
    ('pypi = "not-a-version"', "not a PEP 440 version"),
    ('pypi = ""', "pins.rel.pypi: empty"),
    ('rev = "main; rm -rf /"', "not a git revision"),
    ('rev = "main"\nrepo = "/tmp/x; rm -rf /"', "no shell syntax"),
    ('rev = "HEAD..main"', "not a git revision"),
    ('rev = "' + "a" * 5000 + '"', "5000 characters"),
    ('pypi = "0.5.23"\nrev = "main"', "exactly one"),
])
def test_matrix_bad_pin_sources(ws, pin, needle):
    (ws / "matrix.toml").write_text(MATRIX.replace('pypi = "0.5.23"', pin))
    line = _refused(ws, needle, where="matrix.toml")
    assert _line_no(line, "matrix.toml") in (3, 4, 5)


@pytest.mark.parametrize("old, new, needle", [
    ("gpus = 1", 'gpus = "1"', "profiles.probe.gpus: Input should be a valid integer (got '1')"),
    ("gpus = 1", "gpus = 1\nrequired = \"false\"", "profiles.probe.required: Input should be a valid boolean (got 'false')"),
    ("gpus = 1", "gpus = 1\nrequired = []", "profiles.probe.required: Input should be a valid boolean"),
    ('profiles = ["probe"]', 'profiles = ["probe"]\npins = []', "arches.sm120.pins: empty list"),
    ('profiles = ["probe"]', 'profiles = ["probe"]\nbogus = 1', "arches.sm120.bogus: unknown key"),
    ('image_repo = "forgepatch-test/tiny"', 'image_repo = 5', "smoke.image_repo: Input should be a valid string (got 5)"),
    ("timeout_s = 300", "timeout_s = -1", "profiles.probe.timeout_s"),
    ("[release]", "[[smoke.exclude]]\n\n[release]", "a rule needs at least one"),
    ('[pins.rel]', '[pins."a/b"]\npypi = "0.5.23"\n[pins.rel]', "pins.a/b"),
])
def test_matrix_strict_types_with_lines(ws, old, new, needle):
    text = MATRIX.replace(old, new, 1)
    (ws / "matrix.toml").write_text(text)
    line = _refused(ws, needle, where="matrix.toml")
    key_line = _line_no(line, "matrix.toml")
    assert 1 <= key_line <= len(text.splitlines())


def test_matrix_truncated(ws):
    (ws / "matrix.toml").write_text(MATRIX[: MATRIX.index("pypi") + 9])
    _refused(ws, "invalid TOML", where="matrix.toml")


# -- patch files -----------------------------------------------------------------------------
@pytest.mark.parametrize("old, new, needle", [
    ('arches = ["sm120", "sm121"]', "arches = []", "arches: empty array"),
    ("[[sites]]", None, "sites: expected an array of tables"),
    ("required = true", 'required = "false"', "sites[0].required: expected true or false, got 'false'"),
    ("required = true", "required = []", "sites[0].required: expected true or false, got an array"),
    ("required = true", 'lone = "false"', "sites[0].lone: expected true or false"),
    ('modules = ["srt/comm.py"]', "modules = []", "sites[0].modules: empty array"),
    ('path = "srt/comm.py"', 'path = "../../../etc/passwd"', "examples[0].path"),
    ('path = "srt/comm.py"', 'path = "/etc/passwd.py"', "inside the example"),
    ('path = "srt/comm.py"', 'path = "srt/comm.py"\ncontext = {"../x.py" = "x = 1"}', "examples[0].context"),
    ("required = true", "required = true\nfrobnicate = 1", "sites[0].frobnicate: unknown key"),
    # quoted keys as TOML reads them: escapes decoded, any character (found by the fuzzer: no line)
    ('arches = ["sm120", "sm121"]', 'arches = ["sm120", "sm121"]\n"\\u00e9" = []', "é: unknown key"),
    ('arches = ["sm120", "sm121"]', 'arches = ["sm120", "sm121"]\n"caf\u00e9" = 1', "café: unknown key"),
    ("required = true", 'required = true\n"a\\"b=c" = 1', 'a"b=c: unknown key'),
    ('summary = "widen the tiny fusion gate"', "summary = 5", "summary: expected a string, got 5"),
])
def test_patch_toml_strict(ws, old, new, needle):
    text = PATCH_TOML.replace(old, new, 1) if new is not None else PATCH_TOML[: PATCH_TOML.index(old)] + "sites = 5\n"
    assert text != PATCH_TOML
    (ws / "patches" / "tiny-gate.toml").write_text(text)
    _refused(ws, needle, where="tiny-gate.toml")


def test_patch_toml_not_utf8_and_deep(ws):
    path = ws / "patches" / "tiny-gate.toml"
    path.write_bytes(PATCH_TOML.encode().replace(b"widen the", b"widen th\xe9"))
    line = _refused(ws, "not UTF-8", where="tiny-gate.toml")
    assert _line_no(line, "tiny-gate.toml") == 2
    path.write_text(PATCH_TOML + "x = " + "[" * 3000 + "]" * 3000 + "\n")
    _refused(ws, "nested", where="tiny-gate.toml")


PY_PATCH = '''\
from forgepatch.patching import SiteCodemod
import libcst as cst

PATCH = {
    "id": "tiny-gate",
    "summary": "s",
    "arches": ["sm120"],
    "sites": [{"name": "fusion", "functions": ["use_fusion"], "markers": ["is_sm100_supported"]}],
}
'''


def _py(ws: Path, body: str) -> Path:
    (ws / "patches" / "tiny-gate.toml").unlink()
    path = ws / "patches" / "tiny-gate.py"
    path.write_text(PY_PATCH + body)
    return path


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


@pytest.mark.parametrize("body, needle, at", [
    ("class Codemod:\n    pass\n", "must subclass forgepatch.patching.SiteCodemod", "class Codemod"),
    ("Codemod = 5\n", "Codemod must be a class", "Codemod = 5"),
    ("class Codemod(SiteCodemod):\n    pass\n", "does not define edit_function", "class Codemod"),
    ("class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        raise ValueError('bad edit')\n",
     "edit_function raises ValueError: bad edit", "raise ValueError"),
    ("class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        return 'def f(): pass'\n",
     "edit_function returned str, not a libcst FunctionDef", "def edit_function"),
    ("class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        return func.with_changes(body=5)\n",
     "edit_function's result raises", "def edit_function"),
    ("class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        return None\n"
     "    def finalize_module(self, module, ctx):\n        return None\n", "finalize_module returned NoneType", "def finalize_module"),
    ("class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        import sys\n        sys.exit(0)\n",
     "edit_function calls sys.exit(0)", "sys.exit(0)"),
    ("raise RuntimeError('boom')\n", "raises RuntimeError: boom at import", "raise RuntimeError"),
    ("import sys\nsys.exit(0)\n", "calls sys.exit(0) at import", "sys.exit(0)"),
    ("PATCH['sites'][0]['required'] = 'false'\nclass Codemod(SiteCodemod):\n    def edit_function(self, f, s, q, c):\n        return None\n",
     "sites[0].required: expected true or false", '"sites"'),
])
def test_custom_patch_guarded(ws, body, needle, at):
    path = _py(ws, body)
    line = _refused(ws, needle, where="tiny-gate.py")
    assert _line_no(line, "tiny-gate.py") == _line_of(path, at), line


def _sub_env(**extra: str) -> dict[str, str]:
    import forgepatch

    src = str(Path(forgepatch.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


@pytest.mark.parametrize("body, needle, at", [
    ("import sys\nsys.exit(0)\n", "calls sys.exit(0) at import", "sys.exit(0)"),  # was: exit 0 with nothing done
    ("import time\ntime.sleep(3600)\n", "took more than 2 s", "time.sleep"),  # was: a hang
    ("while True:\n    x = 1\n", "took more than 2 s", None),
])
def test_custom_patch_import_real_process(ws, body, needle, at):
    path = _py(ws, body)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "forgepatch", "--config", ws / "matrix.toml", "--patches",
                           ws / "patches", "apply", "--arch", "sm120", "--source", ws / "src", "--out", ws / "out"],
                          capture_output=True, text=True, timeout=120, env=_sub_env(FORGEPATCH_PATCH_IMPORT_TIMEOUT="2"))
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    lines_ok = [_line_of(path, at)] if at else [_line_of(path, "while True"), _line_of(path, "x = 1")]
    assert any(f"tiny-gate.py:{n}:" in lines[0] for n in lines_ok), lines[0]
    assert not (ws / "out").exists()


def test_debug_keeps_the_traceback(ws):
    _py(ws, "raise RuntimeError('boom')\n")
    proc = subprocess.run([sys.executable, "-m", "forgepatch", "--debug", "--config", ws / "matrix.toml", "--patches",
                           ws / "patches", "apply", "--arch", "sm120", "--source", ws / "src", "--out", ws / "out"],
                          capture_output=True, text=True, timeout=120, env=_sub_env())
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "boom" in proc.stderr


# -- paths on the command line and in the source tree ----------------------------------------
def test_source_path_too_long(ws):
    res = run("--config", ws / "matrix.toml", "--patches", ws / "patches", "apply", "--arch", "sm120",
              "--source", "x" * 300, "--out", ws / "out")
    assert "--source: path too long (300 characters)" in one_line_error(res)


def test_source_tree_symlink_loop_and_dangling_link(ws):
    utils = ws / "src" / "sglang" / "srt"
    (utils / "loop.py").symlink_to("loop.py")
    assert "srt/loop.py: symbolic link loop" in one_line_error(_apply(ws))
    (utils / "loop.py").unlink()
    (utils / "gone.py").symlink_to("nowhere.py")
    assert "srt/gone.py is a dangling symbolic link" in one_line_error(_apply(ws))
    (utils / "gone.py").unlink()
    os.mkfifo(utils / "fifo.py")  # reading it would block forever
    assert "srt/fifo.py is not a regular file" in one_line_error(_apply(ws))
    assert not (ws / "out").exists()
    (ws / "src2").symlink_to("src2")
    res = run("--config", ws / "matrix.toml", "--patches", ws / "patches", "apply", "--arch", "sm120",
              "--source", ws / "src2", "--check")
    assert "--source:" in one_line_error(res) and "symbolic link loop" in res.err


def test_long_pin_name(ws):
    res = run("--config", ws / "matrix.toml", "pin", "add", "p" * 5000, "--pypi", "0.5.23")
    assert "invalid pin name" in one_line_error(res) and "5000 characters" in res.err
    res = run("--config", ws / "matrix.toml", "pin", "add", "ok", "--pypi", "not-a-version")
    assert "--pypi" in one_line_error(res) and "PEP 440" in res.err
    assert (ws / "matrix.toml").read_text() == MATRIX


def test_init_into_a_special_directory(tmp_path):
    assert_one_line_error(forgepatch("init", "--dir", "/proc/self"), 2, "--dir", "/proc/self")
    assert_one_line_error(forgepatch("init", "--dir", tmp_path / ("x" * 300)), 2, "--dir")


def test_probe_log_is_a_directory(tmp_path):
    assert_one_line_error(forgepatch("probe", "--log", tmp_path), 2, "--log", "is a directory")
    (tmp_path / "dangling").symlink_to(tmp_path / "no" / "such")
    assert_one_line_error(forgepatch("probe", "--log", tmp_path / "dangling"), 2, "--log", "dangling")


def test_last_resort_is_one_line(tmp_path):
    """An OS error no service anticipated still ends in one line naming the path."""
    run_ = forgepatch("probe", "--log", "/proc/self/forgepatch.log")
    assert_one_line_error(run_, 2, "/proc/self/forgepatch.log")


def test_source_tree_version_file_not_utf8(ws):
    """A stray byte in a file no patch edits (here version.py) is no error: the version is
    just unknown, and the bytes are left alone."""
    version = ws / "src" / "sglang" / "version.py"
    version.write_bytes(b'__version__ = "0.5.23"  # caf\xe9\n')
    res = _apply(ws, "--json")
    assert res.rc == 0, res.err
    assert (ws / "out" / "sglang" / "version.py").read_bytes() == version.read_bytes()


def test_config_special_files(ws):
    os.mkfifo(ws / "fifo.toml")  # reading it would block forever
    res = run("--config", ws / "fifo.toml", "pin", "list")
    assert "--config:" in one_line_error(res) and "not a regular file" in res.err
    res = run("--config", ws, "pin", "list")
    assert "--config:" in one_line_error(res) and "is a directory" in res.err
    (ws / "loop.toml").symlink_to("loop.toml")
    assert "symbolic link loop" in one_line_error(run("--config", ws / "loop.toml", "pin", "list"))


@pytest.mark.parametrize("body, at", [
    ("import time\n\ndef wait():\n    time.sleep(3600)\n\nwait()\n", 4),  # in the thread an import runs it in
    ("x = 0\nwhile True:\n    x += 1\n", None),  # a Python loop: line 2 or 3, wherever the alarm lands
    ("sum(range(10 ** 15))\n", "killed"),  # one C call that holds the GIL: no alarm runs, the kill ends it
])
def test_the_child_past_its_limit_names_the_line_where_it_was(tmp_path, body, at):
    """The child's limit, hit before the import thread's own (under load, a slow fork or a slow
    libcst import): the child's alarm names file:line; a C call that never yields is killed, no line."""
    from forgepatch.errors import BadInput
    from forgepatch.patching.guard import _import_here
    from forgepatch.patching.isolate import run_isolated

    path = tmp_path / "slow.py"
    path.write_text(body)
    t0 = time.monotonic()
    with pytest.raises(BadInput) as err:
        run_isolated(path, "importing the patch", lambda: _import_here(path), limit=1.0)
    took = time.monotonic() - t0
    text = str(err.value)
    assert "importing the patch took more than 1 s (killed)" in text and "\n" not in text, text
    assert 1.0 <= took < 1.0 + 0.5 + 5, took  # the limit, at most the grace (+ a loaded box) after it
    if at == "killed":
        assert text.startswith(f"{path}: "), text
    elif at is None:
        assert text.startswith((f"{path}:2: ", f"{path}:3: ")), text
    else:
        assert text.startswith(f"{path}:{at}: "), text
