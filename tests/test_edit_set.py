"""Edit sets read off before/after texts (``patching.editset``): what counts as the same edit."""

from __future__ import annotations

import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from forgepatch.patching.editset import digest, file_edits

BEFORE = textwrap.dedent('''
    from sglang.srt.utils import (
        is_sm90_supported,
        is_sm100_supported,
    )


    def adjust(self, model_arch):
        """Docstring."""
        if model_arch in ["DeepseekV3ForCausalLM"]:
            if is_sm100_supported():
                self.attention_backend = "trtllm_mla"
        elif model_arch in ["GptOssForCausalLM"]:
            if is_sm100_supported():
                self.attention_backend = "trtllm_mha"
        return self
''')


def _widen(text: str, model: str) -> str:
    """Widen the sm100 gate of ``model``'s branch (a hand edit, not the codemod)."""
    head, _, tail = text.partition(model)
    return head + model + tail.replace("if is_sm100_supported():", "if is_sm100_supported() or is_sm120_supported():", 1)


def test_one_edit_per_changed_statement_with_its_model_branch():
    after = _widen(_widen(BEFORE, "Deepseek"), "GptOss").replace(
        "    is_sm100_supported,\n", "    is_sm100_supported,\n    is_sm120_supported,\n")
    edits = file_edits("srt/x.py", BEFORE, after)
    assert [(e.function, e.within, e.before, e.after) for e in edits] == [
        ("<module>", (), (), ("from sglang.srt.utils import is_sm120_supported",)),
        ("adjust", ("if model_arch in ['DeepseekV3ForCausalLM']",), ("if is_sm100_supported()",),
         ("if is_sm100_supported() or is_sm120_supported()",)),
        ("adjust", ("elif model_arch in ['GptOssForCausalLM']",), ("if is_sm100_supported()",),
         ("if is_sm100_supported() or is_sm120_supported()",)),
    ]
    assert edits[1].line == 11 and edits[2].line == 14  # for messages; not part of the identity


def test_formatting_comments_and_docstrings_are_not_edits():
    after = BEFORE.replace('"trtllm_mla"', "'trtllm_mla'  # a comment").replace('"""Docstring."""', '"""Other."""')
    after = after.replace("if is_sm100_supported():", "if (is_sm100_supported()):")
    assert file_edits("srt/x.py", BEFORE, after) == []


def test_a_branch_added_upstream_does_not_change_the_other_edits():
    one = file_edits("srt/x.py", BEFORE, _widen(BEFORE, "GptOss"))
    grown = BEFORE.replace('        elif model_arch in ["GptOssForCausalLM"]:',
                           '        elif model_arch in ["Qwen3"]:\n            pass\n'
                           '        elif model_arch in ["GptOssForCausalLM"]:')
    two = file_edits("srt/x.py", grown, _widen(grown, "GptOss"))
    assert digest(one) == digest(two)


def test_a_third_gate_makes_another_set():
    two = file_edits("srt/x.py", BEFORE, _widen(_widen(BEFORE, "Deepseek"), "GptOss"))
    grown = BEFORE.replace("        return self\n", '        elif model_arch in ["Qwen3"]:\n'
                           '            if is_sm100_supported():\n                self.attention_backend = "x"\n'
                           '        return self\n')
    three = file_edits("srt/x.py", grown, _widen(_widen(_widen(grown, "Deepseek"), "GptOss"), "Qwen3"))
    assert len(three) == 3 and digest(two) != digest(three)


def test_duplicates_count():
    a = file_edits("srt/x.py", "def f():\n    x = 1\n", "def f():\n    x = 1\n    y()\n")
    b = file_edits("srt/x.py", "def f():\n    x = 1\n", "def f():\n    x = 1\n    y()\n    x = 1\n    y()\n")
    assert digest(a) != digest(b)


def test_unparseable_text_is_one_edit_not_none():
    edits = file_edits("srt/x.py", "def f(:\n", "def f(): pass\n")
    assert len(edits) == 1 and edits[0].function == "<file>"


_names = st.sampled_from(["a", "b", "is_sm100_supported()", "is_sm120_supported()", "x.y", "f(1)"])


@settings(max_examples=60, deadline=None)
@given(st.lists(_names, min_size=1, max_size=4), st.lists(_names, min_size=1, max_size=4),
       st.integers(min_value=0, max_value=3))
def test_edit_sets_see_every_change_and_ignore_layout(old, new, pad):
    """Property: an edit set is empty iff the code is the same up to layout, and a layout
    change (blank lines, parentheses, line breaks) never changes a non-empty one."""
    def src(terms, spaced):
        test = " or ".join(terms)
        if spaced:
            test = "(\n" + " or\n".join(f"    {t}" for t in terms) + "\n)"
        return "def f():\n" + "\n" * pad * spaced + f"    if {test}:\n        return 1\n    return 0\n"

    plain = file_edits("m.py", src(old, False), src(new, False))
    spaced = file_edits("m.py", src(old, False), src(new, True))
    assert (plain == []) == (old == new)
    assert digest(plain) == digest(spaced)


def test_only_changed_top_level_statements_are_parsed_and_the_edits_are_the_same():
    """The fast path (parse only the top-level statements that differ) and the whole-file
    parse give the same edits: decorators stay with their def, a col-0 docstring is fine."""
    from forgepatch.patching.editset import _chunks, _whole_file_edits

    before = ('"""Module doc\nat column 0.\n"""\nimport os\n\n\n@decorate\ndef f():\n    if is_sm100():\n'
              '        return 1\n\n\nclass C:\n    def g(self):\n        return (a or\nb)\n')
    after = before.replace("if is_sm100():", "if is_sm100() or is_sm120():").replace("import os\n", "import os\nimport re\n")
    assert _chunks(before) is not None
    fast, whole = file_edits("m.py", before, after), _whole_file_edits("m.py", before, after)
    assert [e.key for e in fast] == [e.key for e in whole] and len(fast) == 2
    assert {e.function for e in fast} == {"<module>", "f"}


def test_fast_path_matches_whole_file_on_real_patched_releases():
    from forgepatch.config import load_matrix
    from forgepatch.patching.editset import _whole_file_edits, canonical
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.series import load_series
    from forgepatch.patching.trees import DirTree
    from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES
    from forgepatch.sources import pypi_tree

    matrix = load_matrix(SHIPPED_MATRIX)
    seen = 0
    for version in ("0.5.3.post2", "0.5.14", "0.5.23"):
        for arch in ("sm120", "sm103"):
            series = load_series(matrix, arch, SHIPPED_PATCHES)
            res = run_patches(DirTree(pypi_tree(version).package, True), list(series.patches), series.arch, version)
            for p in res.patches:
                for rel, new in p.changes.items():
                    fast = canonical(file_edits(rel, res.originals[rel], new))
                    assert [e.key for e in fast] == [e.key for e in canonical(_whole_file_edits(rel, res.originals[rel], new))]
                    seen += bool(fast)
    assert seen >= 6



# -- files that are not Python: changed lines ------------------------------------------------------
CU = ("void launch(int major) {\n"
      "  TVM_FFI_ICHECK_EQ(major, 10) << \"MoE kernel requires 10.x\";\n"
      "  run();\n"
      "}\n")


def test_a_text_file_edit_is_its_changed_lines_readable_in_review():
    after = CU.replace("TVM_FFI_ICHECK_EQ(major, 10)", "TVM_FFI_ICHECK(major == 10 || major == 12)")
    (edit,) = file_edits("data/csrc/launcher.cu", CU, after)
    assert edit.function == "<text>" and edit.line == 2
    assert edit.before == ('  TVM_FFI_ICHECK_EQ(major, 10) << "MoE kernel requires 10.x";',)
    assert edit.after == ('  TVM_FFI_ICHECK(major == 10 || major == 12) << "MoE kernel requires 10.x";',)
    assert "not parseable" not in edit.describe()


def test_a_text_edit_is_the_same_on_crlf_and_keeps_bytes_that_are_not_utf8_visible():
    after = CU.replace("major, 10)", "major, 12)")
    lf = digest(file_edits("x.cu", CU, after))
    crlf = CU.replace("\n", "\r\n")
    assert digest(file_edits("x.cu", crlf, after.replace("\n", "\r\n"))) == lf
    junk = CU.encode().replace(b"run();", b"run(); // caf\xe9").decode("utf-8", "surrogateescape")
    (edit,) = file_edits("x.cu", junk, junk.replace("run();", "run2();"))
    assert edit.after == ("  run2(); // caf\\xe9",) and edit.before == ("  run(); // caf\\xe9",)
    assert file_edits("x.cu", CU, CU.replace("\n", "  \n")) == []  # trailing blanks do not count


def test_an_added_text_file_is_one_edit_naming_its_size_and_hash():
    import hashlib

    text = '{"1": {"BLOCK_SIZE_M": 16}}\n'
    (edit,) = file_edits("configs/E=128,N=768,device_name=X.json", "", text, added=True)
    assert edit.before == () and edit.after == (
        f"<new file: 1 lines, sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]}>",)
    other = file_edits("configs/E=128,N=768,device_name=X.json", "", text.replace("16", "32"), added=True)
    assert digest(other) != digest([edit])  # another config is another edit set
