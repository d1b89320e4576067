"""``codemods.base.function_positions`` against libcst's own resolver, on real functions."""

from __future__ import annotations

import ast

import libcst as cst
from hypothesis import given, settings, strategies as st
from libcst.metadata import MetadataWrapper, PositionProvider

from forgepatch.patching.codemods.base import function_positions
from forgepatch.patching.functions import index_functions
from forgepatch.sources import pypi_tree


def _functions(rel: str):
    """Every function of a real file, its longest first."""
    text = (pypi_tree("0.5.23").package / rel).read_text(encoding="utf-8")
    names = {n.name for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    module = cst.parse_module(text)
    return sorted(index_functions(module, names), key=lambda f: -len(module.code_for_node(f[0])))


def _nodes(ranges) -> dict:
    """The ranges of the function's nodes (each side wraps it in a module of its own)."""
    return {node: r for node, r in ranges.items() if not isinstance(node, cst.Module)}


def test_the_same_ranges_as_the_metadata_wrapper():
    """Every node's range of the longest real functions of two files the shipped patches edit
    is what ``MetadataWrapper.resolve(PositionProvider)`` gives."""
    found = _functions("srt/arg_groups/overrides.py")[:6] + _functions("srt/arg_groups/attention_hook.py")[:6]
    assert len(found) >= 10
    for func, _qual in found:
        want = MetadataWrapper(cst.Module(body=[func]), unsafe_skip_copy=True).resolve(PositionProvider)
        got = function_positions(func)
        assert _nodes(got) == _nodes(want)
        assert got[func.name].start.line >= 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["x = 1", "if a:\n    return b", "# c", "", "y = (\n    1,\n    2)",
                                 "for i in r:\n    pass", '"""doc\n"""']), max_size=8),
       st.sampled_from(["", "@dec\n", "@dec(1)\n# note\n"]))
def test_any_shape_of_function(lines, decorator):
    """Comments, blank lines, decorators, multi-line statements: the same ranges."""
    body = "\n".join("    " + line if line else "" for line in "\n".join(lines).splitlines())
    if not body.strip():
        body = "    pass"
    func = cst.parse_module(f"{decorator}def f(a, b):\n{body}\n    return a\n").body[0]
    want = MetadataWrapper(cst.Module(body=[func]), unsafe_skip_copy=True).resolve(PositionProvider)
    assert _nodes(function_positions(func)) == _nodes(want)
