"""Fuzzed matrix.toml files and patch directories (a seeded generator): every run exits 0, 1
or 2; a failed run prints exactly one error line (never an escaped exception), names the
file and line when the problem has one, and writes nothing; the inputs are never changed.

The runs are in-process (``forgepatch.cli.main``) on a tiny SGLang-shaped tree, so a few
hundred configs and patch dirs take well under a minute. ``FORGEPATCH_FUZZ_SEED`` picks
another seed (the default is fixed so CI is reproducible); ``FORGEPATCH_FUZZ_N`` scales it.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from support.badinput import COMM, MATRIX, PATCH_LOCK, PATCH_TOML, LOCATED, one_line_error, run, tiny_patch, tiny_tree

SEED = int(os.environ.get("FORGEPATCH_FUZZ_SEED", "16"))
SCALE = float(os.environ.get("FORGEPATCH_FUZZ_N", "1"))
N_CONFIGS = int(320 * SCALE)
N_PATCHES = int(220 * SCALE)

BAD_VALUES: list[Any] = [
    "false", "true", "", " ", "0", 0, 1, -1, 2**62, 1.5, float("nan"), True, False, [], [[]], {}, {"x": 1},
    ["a", 1], [""], "x" * 5000, "; rm -rf /", "$(reboot)", "`id`", "../../../etc/passwd", "/etc/passwd",
    "a\u0000b", "\u202e", "é", "not-a-version", "1979-05-27T07:32:00Z@", Ellipsis,  # Ellipsis: a TOML datetime
]
BAD_VERSIONS = ["", "not-a-version", "0.5.23; rm -rf /", " 0.5.23", "0.5.23\n", "v", "1.0.0.0.0.0.0.0.0.0" * 10,
                "0.5.23$(id)", "x" * 5000, "==0.5.23", "0.5.*"]
BAD_REVS = ["", "HEAD..main", "a b", "; rm -rf /", "-rf", "main.lock", "x" * 5000, "@{-1}", "a\tb", "$(id)"]
BAD_REPOS = ["", "; rm -rf /", "-oProxyCommand=id", "http://", "a b", "x" * 5000, "$(id)", "ftp://x y"]


# -- a small TOML writer (the generator's data may be any shape) -------------------------------
class Raw(str):
    """A TOML literal written as is (integers no JSON can spell: ``0x...``, ``1_000``, 5,000 digits)."""


def _val(v: Any, depth: int = 0) -> str:
    if isinstance(v, Raw):
        return str(v)
    if v is Ellipsis:
        return "1979-05-27T07:32:00Z"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v != v:
        return "nan"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_val(x, depth + 1) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_val(x, depth + 1)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def to_toml(data: dict[str, Any]) -> str:
    out: list[str] = []

    def table(prefix: list[str], d: dict[str, Any], aot: bool = False) -> None:
        scalars = {k: v for k, v in d.items() if not _is_table(v) and not _is_aot(v)}
        if prefix:
            name = ".".join(json.dumps(p) if not re.fullmatch(r"[A-Za-z0-9_-]+", p) else p for p in prefix)
            out.append(f"[[{name}]]" if aot else f"[{name}]")
        for k, v in scalars.items():
            out.append(f"{json.dumps(k) if not re.fullmatch(r'[A-Za-z0-9_-]+', k) else k} = {_val(v)}")
        out.append("")
        for k, v in d.items():
            if _is_table(v):
                table(prefix + [k], v)
            elif _is_aot(v):
                for item in v:
                    table(prefix + [k], item, aot=True)

    table([], data)
    return "\n".join(out) + "\n"


def _is_table(v: Any) -> bool:
    return isinstance(v, dict) and bool(v) and all(isinstance(k, str) for k in v)


def _is_aot(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(_is_table(x) for x in v)


def _paths(d: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a nested dict/list structure (down to 12 levels)."""
    out: list[tuple] = []
    if len(prefix) > 12:
        return out
    if isinstance(d, dict):
        for k, v in d.items():
            out.append(prefix + (k,))
            out += _paths(v, prefix + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            if isinstance(v, dict):
                out += _paths(v, prefix + (i,))
    return out


def _get(d: Any, path: tuple) -> Any:
    for k in path:
        d = d[k]
    return d


def _deep(rnd: random.Random) -> Any:
    depth = rnd.choice([25, 40, 120])  # deeper: mutate_bytes (3,000 levels)
    v: Any = 1
    for _ in range(depth):
        v = [v] if rnd.random() < 0.5 else {"a": v}
    return v


def mutate_data(rnd: random.Random, data: dict[str, Any], sources: bool = False) -> dict[str, Any]:
    data = json.loads(json.dumps(data))
    for _ in range(rnd.randint(1, 3)):
        paths = _paths(data)
        if not paths:
            break
        path = rnd.choice([p for p in paths if len(p) < 12] or paths)
        parent = _get(data, path[:-1])
        op = rnd.random()
        if op < 0.45:
            parent[path[-1]] = rnd.choice(BAD_VALUES)
        elif op < 0.6 and isinstance(parent, dict):
            del parent[path[-1]]
        elif op < 0.75:
            target = parent if isinstance(parent, dict) else data
            target[rnd.choice(["bogus", "Patches", "required ", "x" * 300, "é"])] = rnd.choice([1, "x", [], {}])
        elif op < 0.85:
            parent[path[-1]] = _deep(rnd)
        elif op < 0.92 and isinstance(parent, dict):
            parent[path[-1]] = []
        elif sources and "pins" in data and isinstance(data["pins"], dict) and data["pins"]:
            pin = data["pins"][next(iter(data["pins"]))]
            if isinstance(pin, dict):
                pin.pop("pypi", None)
                which = rnd.choice(["pypi", "rev", "both", "repo"])
                if which in ("pypi", "both"):
                    pin["pypi"] = rnd.choice(BAD_VERSIONS)
                if which in ("rev", "both", "repo"):
                    pin["rev"] = rnd.choice(BAD_REVS) if which != "repo" else "main"
                if which == "repo":
                    pin["repo"] = rnd.choice(BAD_REPOS)
    return data


def mutate_bytes(rnd: random.Random, raw: bytes) -> bytes:
    op = rnd.random()
    if op < 0.25:
        at = rnd.randrange(len(raw))
        return raw[:at] + bytes([rnd.choice([0xE9, 0xFF, 0xC3, 0x80, 0x00])]) + raw[at:]
    if op < 0.45:
        return raw[: rnd.randrange(len(raw))]
    if op < 0.6:
        return b"\xef\xbb\xbf" + raw if rnd.random() < 0.5 else raw.replace(b"\n", b"\r\n")
    if op < 0.75:
        lines = raw.split(b"\n")
        i = rnd.randrange(len(lines))
        return b"\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1:])
    if op < 0.85:
        return raw + b"\n" + rnd.choice([b"x = " + b"[" * 3000 + b"]" * 3000, b"[a" + b".a" * 3000 + b"]",
                                         b"y = " + b"{a=" * 500 + b"1" + b"}" * 500])
    ba = bytearray(raw)
    for _ in range(rnd.randint(1, 8)):
        ba[rnd.randrange(len(ba))] = rnd.randrange(256)
    return bytes(ba)


def _check(res, inputs: dict[Path, bytes], out: Path, file_name: str, case: str) -> str:
    for path, raw in inputs.items():
        assert path.read_bytes() == raw, f"{case}: {path} was changed"
    if res.rc == 0:
        assert out.is_dir(), case
        return "ok"
    line = one_line_error(res)
    assert not out.exists(), f"{case}: exit {res.rc} but {out} was written ({line})"
    if re.match(r"forgepatch: error: \S*" + re.escape(file_name), line) and res.rc == 2:
        # the file is named: with its line, unless the problem has none (a missing key)
        if not LOCATED.match(line):
            assert re.search(r"missing|must define PATCH|at least one|exactly one|two sites|does not match|"
                             r"unknown patch|no patch|needs 'name'|needs 'before'", line), f"{case}: no line: {line}"
    return line


BASE_MATRIX = {
    "default_pin": "rel", "pins": {"rel": {"pypi": "0.5.23"}},
    "arches": {"sm120": {"patches": ["tiny-gate"], "profiles": ["probe"]}},
    "profiles": {"probe": {"kind": "probe", "gpus": 1, "timeout_s": 300}, "tp1": {"flags": ["--tp-size 1"]}},
    "smoke": {"image_repo": "forgepatch-test/tiny", "include": [{"arch": "sm120", "profile": "tp1"}]},
    "release": {"tag_template": "forgepatch/{pin}/{arch}"},
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    src = tiny_tree(root / "src")
    patches = root / "patches"
    patches.mkdir()
    tiny_patch(patches)
    (root / "matrix.toml").write_text(MATRIX)
    res = run("--config", root / "matrix.toml", "--patches", patches, "apply", "--arch", "sm120", "--source", src,
              "--out", root / "ok")
    assert res.rc == 0, res.err  # the unmutated inputs apply
    return root, src, patches


def test_fuzzed_matrix_configs(world, tmp_path):
    root, src, patches = world
    rnd = random.Random(SEED)
    outcomes: dict[str, int] = {}
    for i in range(N_CONFIGS):
        case = f"config {i} (seed {SEED})"
        data = mutate_data(rnd, BASE_MATRIX, sources=True) if rnd.random() < 0.7 else BASE_MATRIX
        raw = to_toml(data).encode()
        if rnd.random() < 0.35 or data is BASE_MATRIX:
            raw = mutate_bytes(rnd, raw)
        cfg = tmp_path / f"m{i}.toml"
        cfg.write_bytes(raw)
        out = tmp_path / f"out{i}"
        res = run("--config", cfg, "--patches", patches, "apply", "--arch", "sm120", "--source", src, "--out", out)
        try:
            line = _check(res, {cfg: raw}, out, cfg.name, case)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- {cfg.name} ---\n{raw[:2000]!r}") from None
        key = "ok" if line == "ok" else f"exit {res.rc}"
        outcomes[key] = outcomes.get(key, 0) + 1
        shutil.rmtree(out, ignore_errors=True)
    print(f"\nfuzzed matrix configs (seed {SEED}): {outcomes}")
    # the generator must reach both sides: valid configs that apply and bad ones refused
    assert outcomes.get("ok", 0) >= 10 and outcomes.get("exit 2", 0) >= N_CONFIGS // 2, outcomes


BASE_PATCH = {
    "id": "tiny-gate", "summary": "widen the tiny fusion gate", "arches": ["sm120", "sm121"],
    "sites": [{"name": "fusion", "functions": ["use_fusion"], "modules": ["srt/comm.py"],
               "markers": ["is_sm100_supported"], "required": True, "lone": False}],
    "ignore": [{"function": "other", "reason": "not this feature"}],
    "examples": [{"name": "widened", "path": "srt/comm.py", "before": "def use_fusion(enabled):\n    return enabled\n",
                  "upstream": False, "context": {"srt/utils.py": "x = 1\n"}}],
}

PY_HEAD = "from forgepatch.patching import SiteCodemod\nimport libcst as cst\n\n"
PY_PATCH_DICT = ("PATCH = {\n    'id': 'tiny-gate',\n    'summary': 's',\n    'arches': ['sm120'],\n"
                 "    'sites': [{'name': 'fusion', 'functions': ['use_fusion'], 'markers': ['is_sm100_supported']}],\n}\n\n")
PY_OK_CLASS = ("class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n"
               "        return None\n")

# custom .py patches: what a user may write, each must end in one line (exit 1 or 2), never a hang
PY_BODIES = [
    "raise RuntimeError('boom at import')\n",
    "import sys\nsys.exit(0)\n",
    "import sys\nsys.exit(1)\n",
    "import sys\nsys.exit('bye')\n",
    "raise KeyboardInterrupt\n",
    "raise SystemExit\n",
    "def f(): return f()\nf()\n",
    "import time\ntime.sleep(3600)\n",  # (a busy loop at import: test_bad_input_cases, in a subprocess)
    "x = (\n",
    "def broken(:\n",
    "Codemod = 5\n" + PY_PATCH_DICT,
    "class Codemod:\n    pass\n" + PY_PATCH_DICT,
    "class Codemod(SiteCodemod):\n    pass\n" + PY_PATCH_DICT,
    "Codemod = SiteCodemod()\n" + PY_PATCH_DICT,
    PY_PATCH_DICT,
    PY_OK_CLASS,
    "PATCH = 5\n" + PY_OK_CLASS,
    "PATCH = {'id': 'tiny-gate'}\n" + PY_OK_CLASS,
    PY_PATCH_DICT.replace("['sm120']", "[]") + PY_OK_CLASS,
    PY_PATCH_DICT.replace("'sites': [", "'sites': 5, 'x': [") + PY_OK_CLASS,
    PY_PATCH_DICT.replace("'markers'", "'required': 'false', 'markers'") + PY_OK_CLASS,
    PY_PATCH_DICT.replace("'markers'", "'lone': [], 'markers'") + PY_OK_CLASS,
    PY_PATCH_DICT.replace("}\n\n", "'examples': [{'before': 'x=1', 'path': '../../../etc/passwd'}]}\n\n") + PY_OK_CLASS,
    PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        raise ValueError('bad edit')\n",
    PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        import sys\n        sys.exit(0)\n",
    PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        return 'def f(): pass'\n",
    PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        return cst.Name('x')\n",
    PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        return func.with_changes(body=5)\n",
    PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        ctx.report(site.name, 'applied', func, symbol)\n        return func\n",
    PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        return None\n    def finalize_module(self, module, ctx):\n        return None\n",
    PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        return None\n    def finalize_module(self, module, ctx):\n        raise KeyError('k')\n",
    PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def __init__(self, patch):\n        raise TypeError('no')\n    def edit_function(self, func, site, symbol, ctx):\n        return None\n",
    PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    edit_function = 5\n",
]


def _patch_dir(rnd: random.Random, root: Path, lock_rnd: random.Random) -> Path:
    pdir = root
    pdir.mkdir()
    if rnd.random() < 0.3:
        body = rnd.choice(PY_BODIES)
        raw = (PY_HEAD + body).encode()
        if rnd.random() < 0.15:
            raw = mutate_bytes(rnd, raw)
        (pdir / "tiny-gate.py").write_bytes(raw)
    else:
        data = mutate_data(rnd, BASE_PATCH) if rnd.random() < 0.8 else BASE_PATCH
        if rnd.random() < 0.2 and isinstance(data.get("examples"), list) and data["examples"] and isinstance(data["examples"][0], dict):
            data["examples"][0][rnd.choice(["path", "context"])] = rnd.choice(
                ["../../../etc/passwd", "/etc/passwd", "a/../../b.py", "srt\\x.py", {"../x.py": "x"}, {"/abs.py": "y"}, "x.txt"])
        raw = to_toml(data).encode()
        if rnd.random() < 0.3 or data is BASE_PATCH:
            raw = mutate_bytes(rnd, raw)
        (pdir / "tiny-gate.toml").write_bytes(raw)
    # the patch's edit lock (a patch without one is `review`): mostly as accepted, sometimes
    # damaged; drawn from its own generator, so the patch files are the ones of the seed
    lock = PATCH_LOCK.encode()
    (pdir / "tiny-gate.lock").write_bytes(mutate_bytes(lock_rnd, lock) if lock_rnd.random() < 0.2 else lock)
    return pdir


def test_fuzzed_patch_dirs(world, tmp_path, monkeypatch):
    root, src, _patches = world
    monkeypatch.setenv("FORGEPATCH_PATCH_IMPORT_TIMEOUT", "0.5")
    rnd, lock_rnd = random.Random(SEED + 1), random.Random(SEED + 3)
    outcomes: dict[str, int] = {}
    for i in range(N_PATCHES):
        case = f"patch dir {i} (seed {SEED + 1})"
        pdir = _patch_dir(rnd, tmp_path / f"p{i}", lock_rnd)
        inputs = {p: p.read_bytes() for p in sorted(pdir.iterdir(), key=lambda p: p.suffix == ".lock")}  # patch first
        out = tmp_path / f"out{i}"
        cmd = rnd.choice(["apply", "apply", "test"])
        args = (["apply", "--arch", "sm120", "--source", src, "--out", out] if cmd == "apply" else ["patch", "test"])
        res = run("--config", root / "matrix.toml", "--patches", pdir, *args)
        name = next(iter(inputs)).name
        if cmd == "test":  # a failing example is exit 1 with a FAIL line on stdout, not an error line
            if res.rc == 1 and not res.lines:
                assert "FAIL" in res.out, (case, res.out)
                res.rc = 0
                out.mkdir()
            elif res.rc == 0:
                out.mkdir()
        try:
            line = _check(res, inputs, out, name, case)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- {name} ---\n{next(iter(inputs.values()))[:2000]!r}") from None
        key = "ok" if line == "ok" else f"exit {res.rc}"
        outcomes[key] = outcomes.get(key, 0) + 1
        shutil.rmtree(out, ignore_errors=True)
    print(f"\nfuzzed patch dirs (seed {SEED + 1}): {outcomes}")
    assert outcomes.get("ok", 0) >= 10 and outcomes.get("exit 2", 0) >= N_PATCHES // 3, outcomes


# -- huge and odd integers (issue 27 item 6) ------------------------------------------------------
N_NUMBERS = int(1000 * SCALE)
ODD_INTEGERS = [
    "1" + "0" * 5000, "-" + "9" * 4301, "9" * 4300, "0x" + "f" * 5000, "0o" + "7" * 3000, "0b" + "1" * 9000,
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "1_000_000", "1__0", "_1", "1_", "+1", "-0", "+0", "007", "0x", "0xG", "0o8", "0b2", "1e400", "-1e400",
    "1e-400", "inf", "-inf", "+nan", "0.0", "1" * 20, "0x" + "0" * 4000 + "1", "1" + "_0" * 3000,
    "18446744073709551616", "2147483648", "-1", "0", "65536", "3601", "4294967296",
]


def _ints_in(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Key paths of every scalar (integer or not) a number could be put in."""
    out: list[tuple] = []
    if isinstance(data, dict):
        for k, v in data.items():
            out += _ints_in(v, prefix + (k,)) if isinstance(v, (dict, list)) else [prefix + (k,)]
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _ints_in(v, prefix + (i,)) if isinstance(v, (dict, list)) else [prefix + (i,)]
    return out


def test_fuzzed_huge_and_odd_integers(world, tmp_path):
    """A number of any size or spelling in any key of matrix.toml or a patch is one line (exit 2
    naming file:line, or exit 0/1 when the value is fine there): never an internal error."""
    root, src, patches = world
    rnd = random.Random(SEED + 2)
    outcomes: dict[str, int] = {}
    for i in range(N_NUMBERS):
        in_patch = rnd.random() < 0.3
        data = json.loads(json.dumps(BASE_PATCH if in_patch else BASE_MATRIX))
        for _ in range(rnd.randint(1, 2)):
            path = rnd.choice(_ints_in(data))
            _get(data, path[:-1])[path[-1]] = Raw(rnd.choice(ODD_INTEGERS))
        raw = to_toml(data).encode()
        pdir, cfg = patches, root / "matrix.toml"
        if in_patch:
            pdir = tmp_path / f"p{i}"
            pdir.mkdir()
            (pdir / "tiny-gate.toml").write_bytes(raw)
            (pdir / "tiny-gate.lock").write_text(PATCH_LOCK)
            inputs = {pdir / "tiny-gate.toml": raw}
        else:
            cfg = tmp_path / f"m{i}.toml"
            cfg.write_bytes(raw)
            inputs = {cfg: raw}
        out = tmp_path / f"out{i}"
        res = run("--config", cfg, "--patches", pdir, "apply", "--arch", "sm120", "--source", src, "--out", out)
        case = f"number case {i} (seed {SEED + 2})"
        try:
            line = _check(res, inputs, out, next(iter(inputs)).name, case)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- {next(iter(inputs)).name} ---\n{raw[:1500]!r}") from None
        if "number too large" in line:
            assert LOCATED.match(line), (case, line)
        key = "ok" if line == "ok" else ("too large" if "number too large" in line else f"exit {res.rc}")
        outcomes[key] = outcomes.get(key, 0) + 1
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(tmp_path / f"p{i}", ignore_errors=True)
    print(f"\nfuzzed numbers (seed {SEED + 2}): {outcomes}")
    assert outcomes.get("too large", 0) >= N_NUMBERS // 10 and outcomes.get("ok", 0) >= 3, outcomes


# -- hostile custom patches (issue 28 item 3): never exit 0, never a hang -------------------------
VICTIM = "/tmp/forgepatch-hostile-victim"  # a file and a tree outside the run: a patch must leave them
VICTIM_DIR = "/tmp/forgepatch-hostile-dir"
LISTENER = "/tmp/forgepatch-hostile-listener.sock"  # a unix socket a patch must not reach (the Docker engine's, say)
HOSTILE_BODIES = {
    "os._exit at import": "import os\nos._exit(0)\n",
    "SIGSEGV at import": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    "SIGKILL at import": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "C-level regex loop at import": "import re\nre.match(r'(a+)+$', 'a' * 64 + 'b')\n",
    "memory bomb at import": "x = bytearray(64 << 30)\n",
    "os._exit in edit_function": PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        import os\n        os._exit(0)\n",
    "regex loop in edit_function": PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        import re\n        re.match(r'(a+)+$', 'a' * 64 + 'b')\n",
    "os._exit in __init__": PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def __init__(self, patch):\n        import os\n        os._exit(0)\n    def edit_function(self, func, site, symbol, ctx):\n        return None\n",
    "writes a file in edit_function": PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        open(ctx.state.setdefault('p', '/tmp/forgepatch-hostile-write'), 'w').write('owned')\n        return None\n",
    # what changes files without writing data (RLIMIT_FSIZE alone lets all of these through)
    "deletes a file at import": f"import os\nos.remove({VICTIM!r})\n",
    "removes a tree at import": f"import shutil\nshutil.rmtree({VICTIM_DIR!r})\n",
    "truncates a file at import": f"open({VICTIM!r}, 'w').close()\n",
    "runs rm at import": f"import os\nos.system('rm -f {VICTIM}')\n",
    "renames a file in edit_function": PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        import os\n"
                                       f"        os.rename({VICTIM!r}, {VICTIM!r} + '.x')\n        return None\n",
    "runs rm in edit_function": PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        import subprocess\n"
                                f"        subprocess.run(['rm', '-rf', {VICTIM!r}, {VICTIM_DIR!r}])\n        return None\n",
    "chmods a file in finalize_module": PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        return None\n"
                                        "    def finalize_module(self, module, ctx):\n        import os\n"
                                        f"        os.chmod({VICTIM!r}, 0)\n        return module\n",
    # what changes files or reaches out past the "open" event: SQLite creates its file in C, a
    # unix socket's bind creates one, a connect reaches the Docker engine or a registry
    "creates a database at import": "import sqlite3\nsqlite3.connect('/tmp/forgepatch-hostile-write').execute('create table t(x)')\n",
    "binds a unix socket in edit_function": PY_PATCH_DICT + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n"
                                            "        import socket\n        socket.socket(socket.AF_UNIX).bind('/tmp/forgepatch-hostile-write')\n        return None\n",
    "connects to a unix socket at import": f"import socket\nsocket.socket(socket.AF_UNIX).connect({LISTENER!r})\n",
    # a patch that sees the refusal at import, imports cleanly, and tries again in its edit
    "catches the refusal at import, deletes in edit_function": (
        f"import os\ntry:\n    os.remove({VICTIM!r})\nexcept OSError:\n    pass\n\n" + PY_PATCH_DICT
        + "class Codemod(SiteCodemod):\n    def edit_function(self, func, site, symbol, ctx):\n        import os\n"
        f"        os.remove({VICTIM!r})\n        return None\n"),
}


@pytest.mark.parametrize("name", list(HOSTILE_BODIES))
def test_hostile_custom_patches_are_one_line_exit_2(world, tmp_path, monkeypatch, name):
    import time

    root, src, _patches = world
    monkeypatch.setenv("FORGEPATCH_PATCH_IMPORT_TIMEOUT", "1")
    monkeypatch.setattr("forgepatch.patching.guard.EDIT_LIMIT_S", 2.0)
    pdir = tmp_path / "p"
    pdir.mkdir()
    (pdir / "tiny-gate.py").write_text(PY_HEAD + HOSTILE_BODIES[name])
    target = Path("/tmp/forgepatch-hostile-write")
    target.unlink(missing_ok=True)
    victim, victim_dir = Path(VICTIM), Path(VICTIM_DIR)
    shutil.rmtree(victim_dir, ignore_errors=True)
    victim_dir.mkdir()
    (victim_dir / "kept").write_text("kept")
    victim.write_text("kept")
    victim.chmod(0o644)
    Path(LISTENER).unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(LISTENER)
    listener.listen(8)
    listener.setblocking(False)
    for args in (["apply", "--arch", "sm120", "--source", src, "--check"],
                 ["apply", "--arch", "sm120", "--source", src, "--out", tmp_path / "out"]):
        start = time.monotonic()
        res = run("--config", root / "matrix.toml", "--patches", pdir, *args)
        took = time.monotonic() - start
        assert took < 10, (name, took)
        line = one_line_error(res)
        if name.startswith("writes"):  # the write fails in the child (no data reaches the file)
            assert res.rc in (1, 2), (name, line)
        else:
            assert res.rc == 2 and "tiny-gate.py" in line, (name, line)
    assert not (tmp_path / "out").exists()
    assert not target.exists(), "the patch created a file outside its result"
    assert victim.read_text() == "kept" and victim.stat().st_mode & 0o777 == 0o644, "the patch changed a file"
    assert (victim_dir / "kept").read_text() == "kept", "the patch removed a tree"
    try:
        reached = listener.accept()
    except BlockingIOError:
        reached = None
    listener.close()
    Path(LISTENER).unlink(missing_ok=True)
    assert reached is None, "the patch connected to a unix socket"


# -- hostile sources (issue 28 item 4): parser limits by meaning, never a crash or a hang --------
N_SOURCES = int(16 * SCALE)
ROOT_SRC = Path(__file__).resolve().parents[1] / "src"
OPEN_CLOSE = ("()", "[]", "{}")


def _nest(rng: random.Random, depth: int) -> str:
    """An expression nested ``depth`` brackets deep, the kinds mixed (a valid literal)."""
    kinds = [rng.choice(OPEN_CLOSE) for _ in range(depth)]
    inner = "1"
    for o, c in reversed(kinds):
        inner = f"{o}{inner}{',' if o == '(' and rng.random() < 0.3 else ''}{c}"
    return inner


def _hostile_source(rng: random.Random) -> tuple[str, str | None, str]:
    """(text appended to the edited module, the refusal expected or None, a label). The
    generator knows which side of each limit its text is on (parselimits: 100 brackets, a
    chain of 300 operators, 10,000 operators in a statement, 4 MiB), never within a few
    units of one."""
    kind = rng.choice(["nest", "nest", "nest-in-string", "nest-in-comment", "terms", "terms", "size", "indent"])
    if kind == "indent":  # blocks nested in blocks: the tokenizer's limit is 100 levels, as CPython's
        depth = rng.choice([10, 60, 150, 1000])
        body = "".join("    " * i + "if x:\n" for i in range(depth)) + "    " * depth + "pass\n"
        return body, ("too many indentation levels" if depth >= 100 else None), f"indent {depth}"
    if kind == "nest":
        depth = rng.choice([5, 40, 90, 120, 300, 2500, 6000])
        return f"x = {_nest(rng, depth)}\n", ("nested more than" if depth > 100 else None), f"nest {depth}"
    if kind in ("nest-in-string", "nest-in-comment"):
        depth = rng.choice([300, 6000])
        body = "(" * depth + "[" * rng.randint(0, 9)
        text = f"s = {body!r}\n" if kind == "nest-in-string" else f"# {body}\n"
        return text, None, f"{kind} {depth}"  # brackets in a string or comment are not nesting
    if kind == "terms":  # a chain of operators (libcst recurses once per operator), or a flat list
        op = rng.choice([" + ", " * ", " or ", " - ", " and ", ", ", ", "])
        if op == ", ":
            n = rng.choice([2000, 5000, 15000, 120000])
            item = rng.choice(["1", "-1", "a + b", "(c * d)"])
            return f"x = [{op.join([item] * n)}]\n", ("expression too large" if n > 10000 else None), f"list {n} of {item}"
        n = rng.choice([50, 250, 400, 2000, 60000])
        wrap = rng.choice(["{}", "({})", "f({})", "[0, {}]"])
        return f"x = {wrap.format(op.join(['1'] * n))}\n", ("expression too large" if n > 300 else None), f"chain {n}{op.rstrip()}"
    # a large real module is ~400 KB (libcst parses, prints and CPython compiles ~1 MiB in
    # ~10 s, linearly: a quarter MiB stays within the 10 s); 20 MB: tests/test_parse_limits.py
    kib = rng.choice([256, 5 << 10])
    line = f"y_{rng.randrange(10**6)} = {rng.randrange(10**9)}\n"
    return line * ((kib << 10) // len(line) + 1), ("file too large" if kib > 4 << 10 else None), f"size {kib} KiB"


def _hostile_link(rng: random.Random, src: Path, outside: Path) -> tuple[str | None, str]:
    """Maybe a directory link somewhere in the tree: (the refusal expected with --out, label)."""
    where = rng.choice([src / "sglang", src / "sglang" / "srt"])
    kind = rng.choice(["none", "none", "inside", "ancestor loop", "self loop", "escape"])
    name = f"l{rng.randrange(1000)}"
    if kind == "inside":
        (where / name).symlink_to("utils.py" if where.name == "srt" else "srt/utils.py")
        return None, "link inside"
    if kind == "ancestor loop":
        (where / name).symlink_to("..")  # from sglang/ that is the source root: outside the package
        return "loop|outside the tree", "ancestor loop"
    if kind == "self loop":
        (where / name).symlink_to(name)
        return "loop", "self loop"
    if kind == "escape":
        (where / name).symlink_to(outside)
        return "outside the tree", "escape"
    return None, "no link"


def test_fuzzed_hostile_sources(tmp_path):
    """Seeded hostile source trees through the real CLI in a subprocess (a native crash must
    not take pytest down): deep nesting of mixed brackets, the same inside strings and
    comments, huge expressions, huge files, directory links that loop or escape. Each run
    ends within 10 s; under every limit it gives exactly the clean tree's result (the patch
    applied, the hostile text kept byte for byte); past one it is one line naming the file
    (or the link) and exit 2, nothing written. 0 crashes, 0 hangs."""
    import subprocess
    import sys
    import time

    rng = random.Random(SEED + 4)
    env = {"PYTHONPATH": str(ROOT_SRC), "PATH": "/usr/bin:/bin"}
    (tmp_path / "patches").mkdir()
    tiny_patch(tmp_path / "patches")
    (tmp_path / "matrix.toml").write_text(MATRIX)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.py").write_text("x = 1\n")

    def cli(src: Path, *args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "forgepatch", "--config", tmp_path / "matrix.toml", "--patches",
                               tmp_path / "patches", "apply", "--arch", "sm120", "--source", src, *args],
                              capture_output=True, text=True, timeout=60, env=env)

    clean = tiny_tree(tmp_path / "clean")
    base = cli(clean, "--out", tmp_path / "clean-out")
    assert base.returncode == 0, base.stderr
    check = cli(clean, "--check")  # 1: "would change 1 file(s)"
    assert check.returncode == 1 and "would change 1 file(s)" in check.stdout, check.stdout + check.stderr
    patched = (tmp_path / "clean-out" / "sglang" / "srt" / "comm.py").read_text()
    outcomes: dict[str, int] = {}
    for i in range(N_SOURCES):
        src = tiny_tree(tmp_path / f"s{i}")
        text, refusal, label = _hostile_source(rng)
        (src / "sglang" / "srt" / "comm.py").write_text(COMM + "\n" + text)
        link_refusal, link_label = _hostile_link(rng, src, outside)
        mode = rng.choice(["--check", "--out"])
        out = tmp_path / f"o{i}"
        case = f"case {i} (seed {SEED + 4}): {label}, {link_label}, {mode}"
        start = time.monotonic()
        try:
            res = cli(src, *(["--check"] if mode == "--check" else ["--out", out]))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{case}: no answer in 60 s") from None
        took = time.monotonic() - start
        assert took < 10, (case, took)
        assert res.returncode in (0, 1, 2), (case, res.returncode, res.stderr[-500:])
        want = refusal or (link_refusal if mode == "--out" else None)
        if want is None:  # the clean tree's result
            assert res.returncode == (0 if mode == "--out" else 1) and not res.stderr, (case, res.stderr[-500:])
            if mode == "--out":
                got = (out / "sglang" / "srt" / "comm.py").read_text()
                assert got == patched + "\n" + text, case
        else:
            lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
            assert res.returncode == 2 and len(lines) == 1, (case, res.returncode, res.stderr[-500:])
            assert re.search(want, lines[0]), (case, lines[0])
            if refusal:
                assert re.search(r"comm\.py:\d+: ", lines[0]), (case, lines[0])
            assert not (out / "sglang").exists(), case
        outcomes[want or "ok"] = outcomes.get(want or "ok", 0) + 1
        shutil.rmtree(src)
        shutil.rmtree(out, ignore_errors=True)
    print(f"\nfuzzed hostile sources (seed {SEED + 4}): {outcomes}")
    assert outcomes.get("ok", 0) >= N_SOURCES // 6 and len(outcomes) >= 3, outcomes
