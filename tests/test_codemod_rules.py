"""Each declarative edit kind as a rule with VALID and INVALID cases (Fixit's habit), run through
:func:`tests.support.codemodtest.assert_patch` (LibCST's ``CodemodTest`` habit): the real engine,
the self-check and the per-arch evaluation on a small in-memory tree. The real-wheel scenarios
are in test_edit_kinds / test_apply_releases; these pin each rule down where it is decided.
"""

from __future__ import annotations

import pytest

from tests.support.codemodtest import assert_patch

WIDEN = '''
id = "widen-case"
summary = "widen the fusion gate"
arches = ["sm120"]

[[sites]]
name = "fusion"
functions = ["use_fusion"]
modules = ["srt/case.py"]
markers = ["{marker}"]
'''

WIDEN_CALLS_BEFORE = '''
from sglang.srt.utils import is_sm90_supported, is_sm100_supported


def use_fusion(enabled, cp_prefill):
    if cp_prefill and is_sm100_supported():
        return "cp"
    if enabled and (is_sm90_supported() or is_sm100_supported()):
        return True
    return False
'''


def test_widen_adds_the_arch_next_to_its_siblings_and_imports_it_as_the_file_does():
    assert_patch(WIDEN.format(marker="is_sm100_supported"), WIDEN_CALLS_BEFORE, '''
        from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported


        def use_fusion(enabled, cp_prefill):
            if cp_prefill and is_sm100_supported():
                return "cp"
            if enabled and (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):
                return True
            return False
        ''')


def test_widen_follows_the_module_flag_idiom():
    assert_patch(WIDEN.format(marker="_is_sm100_supported"), '''
        from sglang.srt.utils import is_sm90_supported, is_sm100_supported

        _is_sm90_supported = is_sm90_supported()
        _is_sm100_supported = is_sm100_supported()


        def use_fusion(enabled):
            return enabled and (_is_sm90_supported or _is_sm100_supported)
        ''', '''
        from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported

        _is_sm90_supported = is_sm90_supported()
        _is_sm100_supported = is_sm100_supported()
        _is_sm120_supported = is_sm120_supported()


        def use_fusion(enabled):
            return enabled and (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)
        ''')


def test_widen_invalid_marker_renamed_is_drift_not_a_silent_pass():
    # the flags are `_is_sm100_supported`; the marker names the function: nothing to widen here
    assert_patch(WIDEN.format(marker="is_sm100_supported"), '''
        from sglang.srt.utils import is_sm90_supported, is_sm100_supported

        _is_sm100_supported = is_sm100_supported()


        def use_fusion(enabled):
            return enabled and _is_sm100_supported
        ''', status="drift")


def test_widen_invalid_a_predicate_named_for_the_arch_that_reads_no_arch_is_unverified():
    assert_patch(WIDEN.format(marker="is_sm100_supported"), '''
        import os
        from sglang.srt.utils import is_sm90_supported, is_sm100_supported

        _is_sm120_supported = bool(int(os.environ.get("X", "0")))


        def use_fusion(enabled):
            return enabled and (is_sm90_supported() or is_sm100_supported() or _is_sm120_supported)
        ''', status="unverified")


def test_widen_invalid_site_function_gone_is_drift():
    assert_patch(WIDEN.format(marker="is_sm100_supported"), "def other():\n    return 1\n", status="drift")


def test_ignore_keeps_a_neighbouring_sm100_only_gate():
    toml = WIDEN.format(marker="is_sm100_supported") + '''
[[ignore]]
function = "use_fusion"
gate = "cp_prefill"
reason = "upstream keeps context-parallel prefill sm100-only"
'''
    res = assert_patch(toml, WIDEN_CALLS_BEFORE.replace("(enabled, cp_prefill)", "(enabled, cp_prefill)"), '''
        from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported


        def use_fusion(enabled, cp_prefill):
            if cp_prefill and is_sm100_supported():
                return "cp"
            if enabled and (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):
                return True
            return False
        ''')
    assert res.verified


NARROW = '''
id = "narrow-case"
summary = "keep sm103 out of the MNNVL check"
arches = ["sm103"]
codemod = "narrow"

[[sites]]
name = "mnnvl"
functions = ["_mnnvl_supported"]
modules = ["srt/case.py"]
exclude = ["sm103"]
'''


def test_narrow_excludes_exactly_the_arch_from_a_family_check():
    # the family check admits every major-10 GPU; only (10, 3) is taken out, by the registry's test
    assert_patch(NARROW, '''
        from sglang.srt.utils import is_sm100_supported


        def _mnnvl_supported(multi):
            if is_sm100_supported():
                return True
            return not multi
        ''', '''
        from sglang.srt.utils import is_sm100_supported


        def _forgepatch_is_sm103() -> bool:
            """forgepatch: is the device sm103 (compute capability 10.3)?"""
            import torch

            return torch.cuda.is_available() and torch.cuda.get_device_capability() == (10, 3)


        def _mnnvl_supported(multi):
            if is_sm100_supported() and not _forgepatch_is_sm103():
                return True
            return not multi
        ''', arch="sm103")


VALUE = '''
id = "value-case"
summary = "triton, not trtllm, on sm120"
arches = ["{arches}"]
codemod = "value"

[[sites]]
name = "backend"
functions = ["pick"]
modules = ["srt/case.py"]
assign = "backend"
from = "trtllm"
value = "triton"
'''
VALUE_BEFORE = '''
from sglang.srt.utils import is_sm100_supported


def pick(backend):
    if backend == "auto":
        backend = "trtllm"
    return backend
'''


def test_value_for_exactly_sm120_does_not_borrow_the_major_12_family_predicate():
    # `is_sm120_supported()` also admits sm121: a patch for sm120 alone tests (12, 0)
    assert_patch(VALUE.format(arches="sm120"), VALUE_BEFORE, '''
        from sglang.srt.utils import is_sm100_supported


        def _forgepatch_is_sm120() -> bool:
            """forgepatch: is the device sm120 (compute capability 12.0)?"""
            import torch

            return torch.cuda.is_available() and torch.cuda.get_device_capability() == (12, 0)


        def pick(backend):
            if backend == "auto":
                backend = "triton" if _forgepatch_is_sm120() else "trtllm"
            return backend
        ''')


def test_value_for_the_major_12_family_imports_the_family_predicate():
    assert_patch(VALUE.format(arches='sm120", "sm121'), VALUE_BEFORE, '''
        from sglang.srt.utils import is_sm100_supported, is_sm120_supported


        def pick(backend):
            if backend == "auto":
                backend = "triton" if is_sm120_supported() else "trtllm"
            return backend
        ''')


def test_value_invalid_the_old_value_gone_is_drift():
    assert_patch(VALUE.format(arches="sm120"), VALUE_BEFORE.replace('"trtllm"', '"flashinfer"'), status="drift")


GUARD = '''
id = "guard-case"
summary = "refuse EP on sm120"
arches = ["sm120"]
codemod = "guard"

[[sites]]
name = "check"
functions = ["check_args"]
modules = ["srt/case.py"]
condition = '{arg0}.ep_size > 1'
statement = 'raise ValueError("no EP on sm120")'
'''


def test_guard_goes_first_in_the_function_with_the_arch_test_last():
    assert_patch(GUARD, '''
        def check_args(args):
            assert args.tp_size > 0
        ''', '''
        def _forgepatch_is_sm120() -> bool:
            """forgepatch: is the device sm120 (compute capability 12.0)?"""
            import torch

            return torch.cuda.is_available() and torch.cuda.get_device_capability() == (12, 0)


        def check_args(args):
            if args.ep_size > 1 and _forgepatch_is_sm120():
                raise ValueError("no EP on sm120")
            assert args.tp_size > 0
        ''')


MAJOR_LIST = '''
id = "majors-case"
summary = "admit major 12 in the comm JIT module"
package = "flashinfer"
codemod = "major-list"
arches = ["sm120"]

[[sites]]
name = "comm"
functions = ["gen_comm_module"]
modules = ["jit/comm.py"]
'''


@pytest.mark.parametrize("before,after", [
    ("[9, 10]", "[9, 10, 12]"),
    ("[10]", "[10, 12]"),
    ("[9, 10, 12]", None),  # already admits 12: unchanged
])
def test_major_list_adds_the_major_once(before, after):
    code = ("def gen_comm_module():\n"
            "    nvcc_flags = ctx.get_nvcc_flags_list(supported_major_versions={})\n"
            "    return build(nvcc_flags)\n")
    assert_patch(MAJOR_LIST, code.format(before), None if after is None else code.format(after), path="jit/comm.py")


def test_major_list_invalid_a_computed_list_is_drift_never_guessed():
    assert_patch(MAJOR_LIST, '''
        def gen_comm_module():
            nvcc_flags = ctx.get_nvcc_flags_list(supported_major_versions=MAJORS)
            return build(nvcc_flags)
        ''', path="jit/comm.py", status="drift")
