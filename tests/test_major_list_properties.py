"""Property tests of the major-list codemod (hypothesis): whatever the list's spelling,
the widened list lists the arch's major, keeps every other element in order, the file
compiles, a second run is already-applied, and no other byte moves."""

from __future__ import annotations

import ast

from hypothesis import given, settings
from hypothesis import strategies as st

from forgepatch.arch import get_arch
from forgepatch.patching.engine import run_patches
from forgepatch.patching.patchset import build_file_patch
from forgepatch.patching.trees import MemoryTree

PATCH = build_file_patch({"id": "p", "summary": "s", "package": "flashinfer", "codemod": "major-list", "arches": ["sm120"],
                         "sites": [{"name": "s", "functions": ["gen"], "modules": ["jit/*.py"]}]}, "major-list", None, b"")
SM120 = get_arch("sm120")


def _source(values: list[int], tuple_: bool, multiline: bool, trailing: bool, extra: str) -> str:
    sep = ",\n        " if multiline else ", "
    inner = sep.join(map(str, values)) + ("," if trailing and values else "")
    if tuple_ and len(values) == 1 and not trailing:
        inner += ","
    opened, closed = ("(", ")") if tuple_ else ("[", "]")
    body = f"{opened}\n        {inner}\n    {closed}" if multiline else f"{opened}{inner}{closed}"
    return (f"# header {extra}\n\ndef gen():\n    flags = get(\n        supported_major_versions={body}, other=1\n    )\n"
            f"    return flags\n\n\ndef untouched():\n    return get(supported_major_versions=[9])\n")


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.integers(0, 20).filter(lambda v: v != 12), max_size=5, unique=True),
       tuple_=st.booleans(), multiline=st.booleans(), trailing=st.booleans(),
       extra=st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=8))
def test_widened_list_lists_the_major_and_nothing_else_moves(values, tuple_, multiline, trailing, extra):
    text = _source(values, tuple_, multiline, trailing, extra)
    res = run_patches(MemoryTree({"jit/m.py": text}, pristine=True), [PATCH], SM120, None)
    assert res.patches[0].status.value == "applied", res.to_json()
    new = res.changed["jit/m.py"]
    compile(new, "m.py", "exec")
    fn = next(n for n in ast.parse(new).body if isinstance(n, ast.FunctionDef) and n.name == "gen")
    got = next(ast.literal_eval(k.value) for k in ast.walk(fn) if isinstance(k, ast.keyword)
               and k.arg == "supported_major_versions")
    assert isinstance(got, tuple if tuple_ else list)
    assert 12 in got and [v for v in got if v != 12] == values
    # only the list changed: the rest of the file is byte for byte the same
    head, tail = text.split("supported_major_versions=", 1)
    assert new.startswith(head) and new.endswith(text[text.index(", other=1"):])
    again = run_patches(MemoryTree({"jit/m.py": new}), [PATCH], SM120, None)
    assert again.patches[0].status.value == "already-applied" and not again.changed


@given(values=st.lists(st.integers(0, 20), min_size=1, max_size=4, unique=True).filter(lambda v: 12 in v))
def test_a_list_that_lists_the_major_upstream_is_absorbed(values):
    text = _source(values, False, False, False, "")
    res = run_patches(MemoryTree({"jit/m.py": text}, pristine=True), [PATCH], SM120, None)
    assert res.patches[0].status.value == "absorbed-upstream" and not res.changed


def test_names_bools_and_calls_are_not_guessed():
    for spelled in ("MAJORS", "[10, True]", "list(range(9, 11))", "[10] + [11]"):
        text = f"def gen():\n    return get(supported_major_versions={spelled})\n"
        res = run_patches(MemoryTree({"jit/m.py": text}, pristine=True), [PATCH], SM120, None)
        assert res.patches[0].status.value == "drift" and not res.changed, spelled
