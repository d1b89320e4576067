"""The author API for custom codemods (``forgepatch.patching.api``, issue 22 item 4), on real
release files: finding a site by qualified name and marker, an arch test in the file's idiom,
an import the way the file imports, replacing an expression, declaring the edit; and a custom
patch written only against it, run by the engine on a real wheel."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from forgepatch.patching import api
from tests.support.cli import forgepatch

FP8 = "srt/layers/quantization/fp8_utils.py"


def _ctx(version: str, rel: str, arch: str = "sm121"):
    from forgepatch.arch import get_arch
    from forgepatch.patching.codemods.base import FileContext
    from forgepatch.sources import pypi_tree

    root = pypi_tree(version).package

    def read(r):
        p = root / r
        return p.read_text() if p.is_file() else None

    text = read(rel)
    module = cst.parse_module(text)
    return FileContext(get_arch(arch), rel, module, True, read, {}, {}, text=text), module


def test_api_version_and_names():
    assert api.API_VERSION.split(".")[0] == "1"
    assert all(hasattr(api, n) for n in api.__all__)


def test_find_function_by_qualified_name_and_marker():
    _, module = _ctx("0.5.15", "srt/server_args.py")
    f = api.find_function(module, "ServerArgs._handle_attention_backend_compatibility", ["trtllm_mha"])
    assert f is not None and f.name.value == "_handle_attention_backend_compatibility"
    assert api.find_function(module, "ServerArgs._handle_attention_backend_compatibility", ["no_such_marker"]) is None
    assert api.find_function(module, "_handle_attention_backend_compatibility") is None  # a method, not a function


@pytest.mark.parametrize("version,expected,provided", [
    ("0.5.15", "(torch.cuda.is_available() and torch.cuda.get_device_capability() == (12, 1))", None),
    ("0.5.20", "is_sm121()", "imported is_sm121 next to"),  # 0.5.20's utils define is_sm121
])
def test_arch_test_in_the_files_idiom(version, expected, provided):
    ctx, module = _ctx(version, FP8)
    expr = api.arch_test(ctx, ["sm121"])
    assert ctx.module.code_for_node(expr) == expected
    out = api.provide(module, ctx)
    if provided is None:
        assert out.code == module.code and not ctx.provided
    else:
        assert ctx.provided and ctx.provided[0].startswith(provided)
        # into the file's own `from sglang.srt.utils import (...)`, not a new import line
        assert out.code.count("from sglang.srt.utils import") == module.code.count("from sglang.srt.utils import")
        assert "    is_sm121,\n" in out.code


def test_family_test_uses_the_platform_idiom_where_the_file_does():
    ctx, _ = _ctx("0.5.23", FP8, "sm120")
    assert ctx.module.code_for_node(api.arch_test(ctx, ["sm120", "sm121"])) == "get_platform().is_sm120"


def test_add_import_refuses_a_name_the_tree_lacks():
    ctx, module = _ctx("0.5.10", FP8)
    with pytest.raises(LookupError):
        api.add_import(module, ctx, "is_sm121")
    assert api.add_import(module, ctx, "is_sm120_supported") is module  # already imported: unchanged


def test_replace_and_insert_first():
    func = cst.parse_statement('def f():\n    """doc"""\n    # keep\n    x = "a"\n')
    value = func.body.body[1].body[0].value
    out = api.replace(func, value, cst.parse_expression('"b"'))
    assert cst.Module(body=[out]).code.endswith('x = "b"\n')
    with pytest.raises(ValueError):
        api.replace(func, cst.parse_expression("zzz"), value)
    first = api.insert_first(func, "guard()")
    assert cst.Module(body=[first]).code == 'def f():\n    """doc"""\n    guard()\n    # keep\n    x = "a"\n'


CUSTOM = '''
from forgepatch.patching import api

PATCH = {
    "id": "sm121-fp8-triton",
    "summary": "auto FP8 GEMM is triton on sm121",
    "arches": ["sm121"],
    "sites": [{"name": "fp8", "functions": ["initialize_fp8_gemm_config"],
               "modules": ["srt/layers/quantization/fp8_utils.py"], "markers": ["fp8_gemm_runner_backend"]}],
}


class Codemod(api.SiteCodemod):
    def edit_function(self, func, site, symbol, ctx):
        import libcst as cst

        for stmt in func.body.body:
            line = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
            if isinstance(line, cst.Assign) and ctx.code(line.targets[0].target) == "backend":
                test = ctx.module.code_for_node(api.arch_test(ctx, ["sm121"]))
                new = cst.parse_expression(f'"triton" if {test} else {ctx.code(line.value)}')
                api.edited(ctx, site, symbol, line, "triton on sm121")
                return api.replace(func, line.value, new)
        return None

    def finalize_module(self, module, ctx):
        return api.provide(module, ctx)
'''


@pytest.mark.parametrize("version,test", [("0.5.15", "torch.cuda.get_device_capability() == (12, 1)"),
                                          ("0.5.23", "is_sm121()")])
def test_a_custom_patch_on_the_api_runs_on_a_real_wheel(tmp_path, version, test):
    d = tmp_path / "patches"
    d.mkdir()
    (d / "sm121-fp8-triton.py").write_text(CUSTOM)
    (tmp_path / "matrix.toml").write_text(
        f'default_pin = "p"\n[pins.p]\npypi = "{version}"\n[arches.sm121]\npatches = ["sm121-fp8-triton"]\n')
    r = forgepatch("--config", tmp_path / "matrix.toml", "--patches", d, "apply", "--arch", "sm121",
                   "--source", f"pypi:{version}", "--diff")
    assert r.rc == 1 and "review: no lock" in r.err, r.err  # a custom patch's edits are reviewed too
    r = forgepatch("--config", tmp_path / "matrix.toml", "--patches", d, "apply", "--arch", "sm121",
                   "--source", f"pypi:{version}", "--diff", "--accept")
    assert r.rc == 0, r.out + r.err
    assert (d / "sm121-fp8-triton.lock").is_file()
    assert f'+    backend = "triton" if {test}' in r.out or f'"triton" if ({test}' in r.out.replace("torch.cuda.is_available() and ", ""), r.out
