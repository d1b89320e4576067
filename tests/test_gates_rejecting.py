"""`gates` as the maintainer's map (issue 22 item 5), on the real 0.5.23 wheel: every gate has
a role, an sm100 family check shows that it admits sm103, and every row `gates --arch A
--rejecting` lists for sm120 and sm103 is checked against the source (the function holds the
line, the condition is there, the role is what the statement does, the verdict keeps A out),
with one row's `patch new` command run for real."""

from __future__ import annotations

import ast
from functools import lru_cache

import pytest

from tests.support.cli import forgepatch

VERSION = "0.5.23"


@lru_cache(maxsize=None)
def _rows(arch: str):
    r = forgepatch("gates", "--source", f"pypi:{VERSION}", "--arch", arch, "--rejecting", "--json")
    assert r.rc == 0, r.err
    return r.json()


@lru_cache(maxsize=None)
def _source(rel: str):
    from forgepatch.sources import pypi_tree

    text = (pypi_tree(VERSION).package / rel).read_text()
    return text, ast.parse(text)


def _functions(tree):
    out = []

    def walk(body, names):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((".".join(names + [node.name]), node))
                walk(node.body, names + [node.name])
            elif isinstance(node, ast.ClassDef):
                walk(node.body, names + [node.name])
            else:
                for field in ("body", "orelse", "finalbody"):
                    walk(getattr(node, field, []) or [], names)
                for h in getattr(node, "handlers", []) or []:
                    walk(h.body, names)

    walk(tree.body, [])
    return out


def _statement_at(func, line):
    """The innermost statement of ``func`` whose condition starts at ``line``."""
    best = None
    for node in ast.walk(func):
        if isinstance(node, ast.stmt) and node is not func and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno >= best.lineno:
                best = node
    return best


@pytest.mark.parametrize("arch", ["sm120", "sm103"])
def test_every_rejecting_row_against_the_source(arch):
    doc = _rows(arch)
    rows = doc["rows"]
    assert rows and doc["arch"] == arch
    for row in rows:
        text, tree = _source(row["file"])
        # the function holds the line, and the condition is written there
        holders = [f for q, f in _functions(tree) if q == row["function"]
                   and f.lineno <= row["line"] <= (f.end_lineno or f.lineno)]
        assert holders, row
        want = row["expr"][:-3] if row["expr"].endswith("...") else row["expr"]
        at_line = [" ".join(ast.unparse(n).split()) for n in ast.walk(holders[-1])
                   if isinstance(n, (ast.expr, ast.keyword)) and getattr(n, "lineno", None) == row["line"]]
        assert any(u.startswith(want) or want in f"{getattr(n, 'arg', '')}={u}" for u in at_line
                   for n in [None]) or any(want.split("=", 1)[-1] in u for u in at_line), (row, at_line[:5])
        stmt = _statement_at(holders[-1], row["line"])
        raises = isinstance(stmt, ast.If) and any(isinstance(n, ast.Raise) for b in stmt.body for n in ast.walk(b))
        if row["kind"] == "assert":
            assert isinstance(stmt, ast.Assert) and arch not in row["arches"], row  # fails on A
        elif row["role"] == "rejects":
            assert raises, row
            assert arch in row["arches"] and len(row["arches"]) < 5  # it fires on A, and the arch decides
        else:
            if row["role"] in ("enables", "selects"):
                assert not raises, row
            assert arch not in row["arches"], row  # never passes on A
        assert row["patch_new"].startswith(f"forgepatch patch new {arch}-") and f"--function {row['function'].rsplit('.', 1)[-1]}" in row["patch_new"]
    # grouped: one block per (feature, file), each contiguous
    keys = [(r["feature"], r["file"]) for r in rows]
    assert all(keys.index(k) == i or keys[i - 1] == k for i, k in enumerate(keys))


def test_an_sm100_family_check_shows_it_admits_sm103():
    r = forgepatch("gates", "--source", f"pypi:{VERSION}", "--json")
    gates = r.json()["gates"]
    mnnvl = [g for g in gates if g["function"] == "_mnnvl_supported" and g["expr"] == "get_platform().is_sm100"]
    assert mnnvl and "sm103" in mnnvl[0]["arches"] and mnnvl[0]["role"] == "enables"
    assert {g["role"] for g in gates} == {"enables", "selects", "rejects", "mixed"}
    # and so it is not among what keeps sm103 out
    assert not [x for x in _rows("sm103")["rows"] if x["function"] == "_mnnvl_supported"
                and x["expr"] == "get_platform().is_sm100"]


def test_a_rows_patch_new_command_starts_a_patch(tmp_path):
    row = next(r for r in _rows("sm120")["rows"] if r["file"].startswith("srt/") and r["role"] != "rejects")
    argv = row["patch_new"].split()[1:]
    r = forgepatch(*argv, cwd=tmp_path)
    assert r.rc == 0, (row, r.out, r.err)
    assert (tmp_path / "patches" / f"{argv[2]}.toml").is_file()


def test_rejecting_needs_an_arch():
    r = forgepatch("gates", "--source", f"pypi:{VERSION}", "--rejecting")
    assert r.rc == 2 and "--rejecting needs --arch" in r.err
