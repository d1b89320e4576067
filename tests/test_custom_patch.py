"""The custom-codemod escape hatch: `sm103-ep-cuda-graph-guard` on real releases."""

from __future__ import annotations

import ast

import pytest

from tests.support import astcheck
from tests.support.cli import forgepatch
from tests.support.releases import CORPUS, expected_sm103_file

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


@pytest.fixture(scope="module")
def sm103():
    from forgepatch.config import load_matrix
    from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES
    from forgepatch.patching.series import load_series

    return load_series(load_matrix(SHIPPED_MATRIX), "sm103", SHIPPED_PATCHES)


def _guarded_checks(source: str) -> tuple[int, list[str]]:
    """(guards defined at module level, checking functions that call the guard first)."""
    tree = ast.parse(source)
    guards = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == GUARD]
    calls = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "check_server_args"
             and any(isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                     and getattr(s.value.func, "id", "") == GUARD for s in n.body[:2])]
    return len(guards), calls


@pytest.mark.slow
@pytest.mark.parametrize("version", CORPUS)
def test_sm103_corpus(version, sm103):
    """Every release of the corpus: the guard goes into the language server's checking
    function (`srt/` only), the changed files are exactly the reported ones, a second run
    finds it patched, and drift's status scan says the same."""
    from forgepatch.patching.series import run_series
    from forgepatch.patching.trees import DirTree, OverlayTree
    from forgepatch.sources import pypi_tree

    src = pypi_tree(version)
    tree = DirTree(src.package, pristine=True)
    res = run_series(sm103, tree, version)
    assert not res.drift and res.verified, res.to_json()
    where = expected_sm103_file(version)
    assert sorted(res.changed) == [where]
    assert set(res.changed) == res.patches[0].edited_files
    assert all(rel.startswith("srt/") for rel in res.changed)
    # its own check, with ast: one guard, called first by the function that does the checking
    assert _guarded_checks(res.changed[where]) == (1, ["check_server_args"])
    assert astcheck.strip_guard(res.changed[where], GUARD) == astcheck.strip_guard(tree.read(where).decode(), GUARD)
    again = run_series(sm103, OverlayTree(tree, res.changed), version)
    assert not again.drift and not again.changed
    assert [s.status.value for s in again.patches[0].sites] == ["already-applied"]
    scan = run_series(sm103, tree, version, cache={})
    assert [(s.site, s.status) for s in scan.patches[0].sites] == [(s.site, s.status) for s in res.patches[0].sites]
