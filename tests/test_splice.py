"""``patching.splice``: an edited module's text, cut from the original where it is shared.

The claim is exact: the spliced text IS ``Module.code`` of the edited module. It rests on
the span of each statement (its ``ast`` first line less the comment and blank lines libcst
gives it); those are checked against generated code for every statement of real files,
and the splice against ``Module.code`` on generated modules with random edits.
"""

from __future__ import annotations

import ast

import libcst as cst
import pytest
from hypothesis import assume, given, settings, strategies as st

from forgepatch.patching import splice
from forgepatch.patching.functions import replace_functions
from forgepatch.sources import pypi_tree


def _check_spans(text: splice._Text, stmts, nodes, end: int, first: int, indent: list[str]) -> int:
    """Every statement's span is its generated code (class bodies too); the count checked."""
    groups = splice._groups(stmts, nodes)
    checked = 0
    for stmt, span, group in zip(stmts, splice._spans(stmts, groups, end, first), groups):
        assert text.code(stmt, indent) == text.cut(*span), span
        checked += 1
        if isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock) and stmt.body.body:
            inner = indent + [stmt.body.indent if stmt.body.indent is not None else text.module.default_indent]
            checked += _check_spans(text, list(stmt.body.body), group[0].body, span[1] - len(stmt.body.footer),
                                    splice._start(stmt.body.body[0], group[0].body), inner)
    return checked


REAL = ["srt/arg_groups/overrides.py", "srt/arg_groups/attention_hook.py", "srt/server_args.py",
        "srt/layers/flashinfer_comm_fusion.py", "srt/layers/layer_boundary/boundary.py", "srt/utils/common.py",
        "srt/layers/quantization/fp8_utils.py", "srt/model_executor/model_runner.py"]


@pytest.mark.parametrize("rel", REAL)
def test_every_statement_span_of_real_files(rel):
    """Files the shipped and example patches edit, and big ones with decorators, comments
    between methods, docstrings and nested classes (0.5.23)."""
    path = pypi_tree("0.5.23").package / rel
    source = path.read_text(encoding="utf-8")
    module = cst.parse_module(source)
    text = splice._Text(source, module)
    checked = _check_spans(text, list(module.body), ast.parse(source).body,
                           source.count("\n") + 1 - len(module.footer), len(module.header) + 1, [])
    assert checked >= 10


def test_a_method_edit_in_a_real_file_is_module_code():
    """A method of a class in a real file rewritten (as a codemod does, through
    ``replace_functions``) and an import added: the splice is ``Module.code``, byte for byte."""
    source = (pypi_tree("0.5.23").package / "srt/arg_groups/attention_hook.py").read_text(encoding="utf-8")
    module = cst.parse_module(source)
    funcs = [n for n in _walk_defs(module)]
    assert len(funcs) > 3
    target = funcs[len(funcs) // 2]
    new_func = target.with_changes(body=target.body.with_changes(
        body=[cst.parse_statement("x = 1  # added\n"), *target.body.body]))
    edited = replace_functions(module, {target: new_func})
    edited = edited.with_changes(body=[cst.parse_statement("import os_added\n"), *edited.body])
    got = splice.spliced_code(module, source, edited, ast.parse(source))
    assert got is not None
    assert got == edited.code
    assert got.count("\n") == source.count("\n") + 2


def _walk_defs(node):
    for stmt in getattr(node, "body", ()) if isinstance(node, cst.Module) else node.body.body:
        if isinstance(stmt, cst.FunctionDef):
            yield stmt
        if isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
            yield from _walk_defs(stmt)


# -- generated modules, random edits --------------------------------------------------------
_BLOCKS = [
    "import a\n", "from b import (\n    c,\n    d,\n)\n", "x = 1; y = 2\n", "# a comment\n", "\n",
    "def f(a):\n    # inside\n    return a\n", "@dec\n# between\n@dec2(1)\ndef g():\n    pass\n",
    'S = """multi\nline\n"""\n', "if x:\n    y = 1\nelse:\n    y = 2\n",
    "class C:\n    '''doc'''\n\n    # before m\n    def m(self):\n        return 1\n    # footer comment\n\n"
    "    @property\n    def p(self):\n        return 2\n",
    "class D(C):\n    def n(self):\n        if self:\n            return 3\n        # trailing in n\n",
]


@st.composite
def modules(draw):
    blocks = draw(st.lists(st.sampled_from(_BLOCKS), min_size=1, max_size=9))
    source = "".join(blocks)
    if draw(st.booleans()):
        source = "# header comment\n\n" + source
    if draw(st.booleans()):
        source += "# footer\n\n"
    return source


def _edits(module: cst.Module, choice: int, where: int):
    """One of: rewrite a function (top-level or a method), add an import, remove a top-level
    statement, add a top-level def at the end, rename a class (generated whole)."""
    funcs = list(_walk_defs(module))
    if choice == 0 and funcs:
        f = funcs[where % len(funcs)]
        new = f.with_changes(body=f.body.with_changes(body=[cst.parse_statement("z = 0\n"), *f.body.body]))
        return replace_functions(module, {f: new})
    if choice == 1:
        body = list(module.body)
        body.insert(where % (len(body) + 1), cst.parse_statement("import added\n"))
        return module.with_changes(body=body)
    if choice == 2 and len(module.body) > 1:
        body = list(module.body)
        del body[where % len(body)]
        return module.with_changes(body=body)
    if choice == 3:
        return module.with_changes(body=[*module.body, cst.parse_statement("def tail():\n    return None\n")])
    classes = [i for i, s in enumerate(module.body) if isinstance(s, cst.ClassDef)]
    if classes:
        body = list(module.body)
        i = classes[where % len(classes)]
        body[i] = body[i].with_changes(name=cst.Name("Renamed"))
        return module.with_changes(body=body)
    return None


@settings(max_examples=300, deadline=None)
@given(modules(), st.lists(st.tuples(st.integers(0, 4), st.integers(0, 50)), min_size=1, max_size=3))
def test_splice_is_module_code(source, edits):
    """Whatever the edits, the splice is exactly ``Module.code``; it never declines these
    shapes (statements, all ending in a newline, none using ``\\r``)."""
    module = cst.parse_module(source)
    assume(module.body)  # only comments: nothing to cut, the whole module is generated
    edited = module
    for choice, where in edits:
        edited = _edits(edited, choice, where) or edited
    assume(edited is not module and edited.body)
    got = splice.spliced_code(module, source, edited, ast.parse(source))
    assert got is not None
    assert got == edited.code


def test_declines_what_it_cannot_place():
    """``\\r\\n`` newlines, no newline at the end, or an ``ast`` that is not the text's (every
    line one off): None, and ``module_code`` generates the whole module."""
    source = "import a\n\n\ndef f():\n    return 1\n"
    module = cst.parse_module(source)
    f = module.body[1]
    edited = replace_functions(module, {f: f.with_changes(name=cst.Name("g"))})
    assert splice.spliced_code(module, source, edited, ast.parse(source)) == edited.code
    shifted = ast.parse("\n" + source)
    assert splice.spliced_code(module, source, edited, shifted) is None
    for other in (source.replace("\n", "\r\n"), source.rstrip("\n")):
        m = cst.parse_module(other)
        e = replace_functions(m, {m.body[1]: m.body[1].with_changes(name=cst.Name("g"))})
        assert splice.spliced_code(m, other, e, ast.parse(other)) is None
        assert splice.module_code(m, other, e, ast.parse(other)) == e.code


def test_a_wrong_span_at_the_edit_is_caught():
    """An ``ast`` whose lines are right up to the edited function and one off from there
    (a span that would cut a line too many): the old statement's text is not its code, so
    nothing is spliced."""
    source = "x = 1\n\n# about f\ndef f():\n    return 1\n\n\ndef h():\n    return 2\n"
    module = cst.parse_module(source)
    f = module.body[1]
    edited = replace_functions(module, {f: f.with_changes(name=cst.Name("g"))})
    tree = ast.parse(source)
    tree.body[1].lineno -= 1  # the def one line higher: its span would start at "\n"
    assert splice.spliced_code(module, source, edited, tree) is None
