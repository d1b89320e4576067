"""The custom-codemod escape hatch: `sm103-ep-cuda-graph-guard` on real releases."""

from __future__ import annotations

import ast

import pytest

from tests.support.cli import forgepatch

GUARD = "_forgepatch_sm103_ep_graph_guard"


@pytest.mark.parametrize("version,where", [
    ("0.5.3", "srt/server_args.py"),
    ("0.5.15", "srt/server_args.py"),
    ("0.5.20", "srt/arg_groups/validation_hook.py"),
    ("0.5.23", "srt/arg_groups/validation_hook.py"),
])
def test_guard_goes_into_the_checking_function(tmp_path, version, where):
    out = tmp_path / "o"
    run = forgepatch("apply", "--arch", "sm103", "--source", f"pypi:{version}", "--out", out, "--json")
    assert run.rc == 0, run.err
    doc = run.json()
    assert doc["changed_files"] == [where]
    tree = ast.parse((out / "sglang" / where).read_text())
    guard = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == GUARD]
    assert len(guard) == 1
    assert "(10, 3)" in ast.unparse(guard[0])  # sm_103's compute capability, from the registry
    checks = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "check_server_args"]
    calls = [c for c in checks if any(isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                                      and getattr(s.value.func, "id", "") == GUARD for s in c.body[:2])]
    assert len(calls) == 1
    # run the guard for real: refuses EP with graphs only on sm_103 (no GPU here: no refusal)
    ns: dict = {}
    exec(compile(ast.Module(body=guard, type_ignores=[]), where, "exec"), ns)
    args = type("Args", (), {"ep_size": 8, "disable_cuda_graph": False})()
    assert ns[GUARD](args) is None
    again = forgepatch("apply", "--arch", "sm103", "--source", out, "--check")
    assert again.rc == 0


def test_sm120_series_does_not_carry_the_sm103_guard(tmp_path):
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--diff")
    assert run.rc == 0 and GUARD not in run.out
