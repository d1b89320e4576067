"""Upstream refactors the sm120 patch must survive, or fail honestly on (exit 1 with the
place named), never "applied" with the arch still rejected. Each case is a few lines
written from the shapes the release sources have (0.5.10 communicator, 0.5.15 backend
check, 0.5.20 `get_platform()` idiom, 0.5.23 layer_boundary), changed the way a refactor
would change them."""

from __future__ import annotations

import pytest

from forgepatch.arch import get_arch
from forgepatch.paths import SHIPPED_PATCHES
from forgepatch.patching.engine import run_patches
from forgepatch.patching.patchset import load_patches
from forgepatch.patching.trees import MemoryTree
from tests.support import astcheck

PATCHES = load_patches(SHIPPED_PATCHES, ["sm120-flashinfer-allreduce-fusion"])
COMM = "srt/layers/communicator.py"
FUSION = "srt/layers/flashinfer_comm_fusion.py"
UTILS = "def is_sm90_supported(device=None): ...\ndef is_sm100_supported(device=None): ...\ndef is_sm120_supported(device=None): ...\n"
PLATFORM = "def get_platform(): ...\n_FLAGS = ('is_sm90', 'is_sm100', 'is_sm120')\n"

# 0.5.10's runtime gate, trimmed
RUNTIME = '''from sglang.srt.utils import is_cuda, is_sm90_supported, is_sm100_supported

_is_cuda = is_cuda()
_is_sm90_supported = _is_cuda and is_sm90_supported()
_is_sm100_supported = _is_cuda and is_sm100_supported()


def apply_flashinfer_allreduce_fusion(batch_size: int):
    return (
        (_is_sm90_supported or _is_sm100_supported)
        and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE
        and get_global_server_args().enable_flashinfer_allreduce_fusion
    )
'''
# 0.5.15's backend check, trimmed
BACKEND = '''from sglang.srt.utils import is_sm90_supported, is_sm100_supported


def _resolve_backend(backend: str, is_multi_node: bool = False) -> str:
    if not (is_sm90_supported() or is_sm100_supported()):
        raise ValueError("FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs.")
    if is_sm100_supported():
        return "mnnvl"
    return "trtllm"
'''


def apply(files: dict[str, str]):
    base = {"srt/utils.py": UTILS, "srt/runtime_context.py": PLATFORM}
    res = run_patches(MemoryTree({**base, **files}, pristine=True), PATCHES, get_arch("sm120"), None)
    scan = run_patches(MemoryTree({**base, **files}, pristine=True), PATCHES, get_arch("sm120"), None, cache={})
    # drift agrees with the engine (a status scan produces no text, so it has no per-arch
    # evaluation: it is compared with the engine's verdict before that evaluation)
    plain = run_patches(MemoryTree({**base, **files}, pristine=True), PATCHES, get_arch("sm120"), None, evaluate=False)
    assert [p.status for p in scan.patches] == [p.status for p in plain.patches]
    return res


def sites(res) -> dict[str, str]:
    return {s.site: s.status.value for p in res.patches for s in p.sites}


def found(res, status: str):
    return [loc for p in res.patches for s in p.sites for loc in s.locations if loc.status.value == status]


def accepts(res, rel: str, func: str) -> bool:
    return func in [fn for fn, _ in astcheck.gates_accepting(res.changed[rel], "sm120")]


def test_rename_to_a_known_name_is_followed():
    res = apply({COMM: RUNTIME.replace("def apply_flashinfer_allreduce_fusion(", "def flashinfer_ar_fusion_applies(")})
    assert not res.drift and accepts(res, COMM, "flashinfer_ar_fusion_applies")


def test_rename_to_an_unknown_name_is_drift_with_the_new_name_as_candidate():
    res = apply({COMM: RUNTIME.replace("def apply_flashinfer_allreduce_fusion(", "def allreduce_fusion_enabled(")})
    assert res.drift and not res.changed
    runtime = next(s for p in res.patches for s in p.sites if s.site == "runtime-fusion-gate")
    assert runtime.status.value == "drift"
    assert any("allreduce_fusion_enabled" in c for c in runtime.candidates)
    # and the self-check names the gate itself
    assert [(loc.file, loc.symbol) for loc in found(res, "incomplete")] == [(COMM, "allreduce_fusion_enabled")]


def test_move_out_of_the_sites_modules_with_a_re_export_is_incomplete_not_silent():
    moved = "srt/layers/flashinfer_comm/backend.py"
    res = apply({COMM: RUNTIME, moved: BACKEND,
                 FUSION: "from sglang.srt.layers.flashinfer_comm.backend import _resolve_backend  # noqa: F401\n"})
    assert sites(res)["backend-check"] == "not-applicable"  # the site's module no longer has it
    assert res.drift and res.incomplete and moved not in res.changed
    (loc,) = found(res, "incomplete")
    assert (loc.file, loc.line, loc.symbol) == (moved, 5, "_resolve_backend")


def test_move_within_the_sites_modules_is_followed():
    moved = "srt/layers/layer_boundary/fusion.py"
    res = apply({moved: RUNTIME})
    assert not res.drift and accepts(res, moved, "apply_flashinfer_allreduce_fusion")


def test_helper_re_exported_through_a_package_star_import():
    utils_pkg = {"srt/utils/__init__.py": "from sglang.srt.utils.common import *  # noqa: F403\n",
                 "srt/utils/common.py": UTILS}
    res = run_patches(MemoryTree({**utils_pkg, "srt/runtime_context.py": PLATFORM, COMM: RUNTIME, FUSION: BACKEND},
                                 pristine=True),
                      PATCHES, get_arch("sm120"), None)
    assert not res.drift
    new = res.changed[FUSION]
    assert "from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported" in new
    read = {**utils_pkg, FUSION: new}.get
    assert astcheck.names_resolve(new, read, FUSION)


def test_idiom_change_to_get_platform_without_the_attribute_falls_back_to_the_function():
    platform = "def get_platform(): ...\n_FLAGS = ('is_sm90', 'is_sm100')\n"  # no is_sm120 yet
    src = BACKEND.replace("from sglang.srt.utils import is_sm90_supported, is_sm100_supported",
                          "from sglang.srt.runtime_context import get_platform").replace(
        "is_sm90_supported() or is_sm100_supported()", "get_platform().is_sm90 or get_platform().is_sm100").replace(
        "if is_sm100_supported():", "if get_platform().is_sm100:")
    res = run_patches(MemoryTree({"srt/utils.py": UTILS, "srt/runtime_context.py": platform, COMM: RUNTIME, FUSION: src},
                                 pristine=True),
                      PATCHES, get_arch("sm120"), None)
    assert not res.drift
    new = res.changed[FUSION]
    assert "get_platform().is_sm90 or get_platform().is_sm100 or is_sm120_supported()" in new
    assert astcheck.names_resolve(new, {"srt/utils.py": UTILS, FUSION: new}.get, FUSION)


def test_a_copy_of_the_gate_in_another_module_is_incomplete():
    copy = "srt/layers/quantization/fused_ar.py"
    res = apply({COMM: RUNTIME, copy: RUNTIME.replace("apply_flashinfer_allreduce_fusion", "fused_ar_supported")})
    assert res.incomplete and not res.changed.get(copy)
    assert [(loc.file, loc.symbol) for loc in found(res, "incomplete")] == [(copy, "fused_ar_supported")]


@pytest.mark.parametrize("decorator", ["@lru_cache(maxsize=1)", "@torch.compile(dynamic=True)"])
def test_decorated_site_function(decorator):
    src = RUNTIME.replace("\n\ndef apply_flashinfer_allreduce_fusion(", f"\n\n{decorator}\ndef apply_flashinfer_allreduce_fusion(")
    res = apply({COMM: src})
    assert not res.drift and accepts(res, COMM, "apply_flashinfer_allreduce_fusion")
    assert decorator in res.changed[COMM]
    (edit,) = [loc for loc in found(res, "applied") if loc.symbol != "<module>"]
    assert edit.line == src.splitlines().index("        (_is_sm90_supported or _is_sm100_supported)") + 1


def test_staticmethod_site_function():
    src = BACKEND.replace("\n\ndef _resolve_backend(", "\n\nclass FusionBackend:\n    @staticmethod\n    def _resolve_backend(")
    src = src.replace("\n    if ", "\n        if ").replace("\n        raise", "\n            raise").replace(
        "\n        return", "\n            return").replace("\n    return", "\n        return")
    res = apply({COMM: RUNTIME, FUSION: src})
    assert not res.drift, res.to_json()
    assert accepts(res, FUSION, "_resolve_backend")
    assert [loc.symbol for loc in found(res, "applied") if loc.file == FUSION and loc.symbol != "<module>"] == [
        "FusionBackend._resolve_backend"]


def test_gate_split_over_lines_with_comments():
    src = BACKEND.replace("    if not (is_sm90_supported() or is_sm100_supported()):\n", (
        "    if not (\n"
        "        # Hopper\n"
        "        is_sm90_supported()\n"
        "        # datacenter Blackwell\n"
        "        or is_sm100_supported()\n"
        "    ):\n"))
    res = apply({COMM: RUNTIME, FUSION: src})
    assert not res.drift and accepts(res, FUSION, "_resolve_backend")
    new = res.changed[FUSION]
    assert "        # Hopper\n" in new and "        # datacenter Blackwell\n" in new
    (edit,) = [loc for loc in found(res, "applied") if loc.file == FUSION and loc.symbol != "<module>"]
    assert edit.line == src.splitlines().index("        is_sm90_supported()") + 1


def test_gate_in_a_closure_of_the_site_function():
    src = RUNTIME.replace('''def apply_flashinfer_allreduce_fusion(batch_size: int):
    return (''', '''def apply_flashinfer_allreduce_fusion(batch_size: int):
    def _ok():
        return (''').replace("    )\n", "        )\n\n    return _ok()\n")
    res = apply({COMM: src})
    assert not res.drift and accepts(res, COMM, "_ok")


def test_gate_moved_into_a_module_constant_is_named_not_skipped():
    src = RUNTIME.replace("\n\ndef apply_flashinfer_allreduce_fusion", (
        "\n_FUSION_ARCH_OK = _is_sm90_supported or _is_sm100_supported\n"
        "\n\ndef apply_flashinfer_allreduce_fusion")).replace(
        "(_is_sm90_supported or _is_sm100_supported)\n", "_FUSION_ARCH_OK\n")
    res = apply({COMM: src})
    assert res.drift and not res.changed
    assert sites(res)["runtime-fusion-gate"] == "drift"  # the function has no gate any more
    assert [(loc.symbol, loc.gate) for loc in found(res, "incomplete")] == [
        ("_FUSION_ARCH_OK", "_is_sm90_supported or _is_sm100_supported")]


def test_async_site_function():
    res = apply({COMM: RUNTIME.replace("def apply_flashinfer_allreduce_fusion(", "async def apply_flashinfer_allreduce_fusion(")})
    assert not res.drift and accepts(res, COMM, "apply_flashinfer_allreduce_fusion")


def test_marker_only_in_the_docstring_is_not_a_site():
    src = RUNTIME.replace(
        "        and get_global_server_args().enable_flashinfer_allreduce_fusion\n", "").replace(
        "        and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE\n", "        and batch_size > 0\n").replace(
        "def apply_flashinfer_allreduce_fusion(batch_size: int):\n",
        'def apply_flashinfer_allreduce_fusion(batch_size: int):\n    """Gates enable_flashinfer_allreduce_fusion."""\n')
    res = apply({COMM: src})
    assert sites(res)["runtime-fusion-gate"] == "drift" and not res.changed
    runtime = next(s for p in res.patches for s in p.sites if s.site == "runtime-fusion-gate")
    assert "no marker in code" in runtime.detail


# -- issue 21: gate shapes the recognizer was not taught, on real release sources -------------
# Each case takes the real runtime-gate file of a release (0.5.10's communicator, 0.5.23's
# layer_boundary add_norm) with the real predicate modules, and rewrites its arch test
# `(_is_sm90_supported or _is_sm100_supported)` into another spelling of "sm90 or sm100".
# Either the patch lands and the written gate accepts sm120, or apply fails naming the place
# (drift / incomplete / unverified / wrong): never exit 0 with sm120 still rejected.
from tests.test_apply_evaluation import ARCH_TESTS  # noqa: E402  (the same shape classes, by hand)

REAL = {  # layout -> (release, runtime file, function)
    "0.5.10": ("0.5.10", COMM, "apply_flashinfer_allreduce_fusion"),
    "0.5.23": ("0.5.23", "srt/layers/layer_boundary/residual/add_norm.py", "flashinfer_ar_fusion_applies"),
}
REAL_SUPPORT = ("srt/utils/__init__.py", "srt/utils/common.py", "srt/runtime_context.py")
GATE = "(_is_sm90_supported or _is_sm100_supported)"
LANDS = {"constants", "calls", "newer sibling"}  # shapes the codemod widens (the rest: refused)


def _real_files(layout: str) -> tuple[dict[str, str], str, str]:
    from forgepatch.sources import pypi_tree

    version, rel, func = REAL[layout]
    pkg = pypi_tree(version).package
    files = {r: (pkg / r).read_text() for r in (*REAL_SUPPORT, rel) if (pkg / r).exists()}
    return files, rel, func


def _reshape(text: str, func: str, shape: str) -> str:
    expr, extra_import, helper = ARCH_TESTS[shape]
    assert GATE in text
    head = ("import functools\nimport torch\n"
            "from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm110_supported\n")
    if helper.startswith("from "):
        head += helper
        helper = ""
    text = text.replace(GATE, f"({expr})", 1)
    at = text.index(f"def {func}(")
    return head + text[:at] + helper + "\n\n" + text[at:]


def _apply_real(files: dict[str, str], version: str):
    return run_patches(MemoryTree(files, pristine=True), PATCHES, get_arch("sm120"), version)


def _failed_statuses(res) -> set[str]:
    return {loc.status.value for p in res.patches for s in p.sites for loc in s.locations if loc.status.failed} | {
        s.status.value for p in res.patches for s in p.sites if s.status.failed}


@pytest.mark.parametrize("layout", sorted(REAL))
@pytest.mark.parametrize("shape", sorted(ARCH_TESTS))
def test_real_release_gate_shape_lands_or_is_refused(layout, shape):
    files, rel, func = _real_files(layout)
    files[rel] = _reshape(files[rel], func, shape)
    files.setdefault("srt/utils/common.py", "")
    files["srt/utils/common.py"] += "\n\ndef is_sm110_supported(device=None):\n    return torch.cuda.get_device_capability(device)[0] == 11\n"
    res = _apply_real(files, REAL[layout][0])
    if shape in LANDS:
        assert not res.drift, (shape, _failed_statuses(res))
        assert func in [fn for fn, _ in astcheck.gates_accepting(res.changed[rel], "sm120")]
        assert all(c.status in ("ok", "incomplete") for p in res.patches for c in p.checks)
    else:
        assert res.drift, shape  # exit 1, nothing written
        assert _failed_statuses(res) & {"drift", "incomplete", "unverified", "wrong"}


@pytest.mark.parametrize("layout", sorted(REAL))
def test_real_release_early_return_of_the_arch_is_a_feature_gate(layout):
    files, rel, func = _real_files(layout)
    text = files[rel]
    at = text.index(f"def {func}(")
    body = text.index("    return (", at)
    files[rel] = text[:body] + f"    if not {GATE}:\n        return False\n" + text[body:].replace(GATE, "True", 1)
    res = _apply_real(files, REAL[layout][0])
    assert res.drift and _failed_statuses(res) & {"drift", "incomplete"}
    assert any(c.status == "incomplete" and c.function == func for p in res.patches for c in p.checks)


@pytest.mark.parametrize("layout", sorted(REAL))
def test_real_release_elif_per_arch_is_refused(layout):
    files, rel, func = _real_files(layout)
    text = files[rel]
    at = text.index(f"def {func}(")
    body = text.index("    return (", at)
    chain = ("    if _is_sm90_supported:\n        arch_ok = True\n    elif _is_sm100_supported:\n        arch_ok = True\n"
             "    else:\n        arch_ok = False\n")
    files[rel] = text[:body] + chain + text[body:].replace(GATE, "arch_ok", 1)
    res = _apply_real(files, REAL[layout][0])
    assert res.drift
    assert any(c.status == "incomplete" and c.function == func for p in res.patches for c in p.checks)


@pytest.mark.parametrize("layout", sorted(REAL))
def test_real_release_new_module_with_the_features_gate_is_seen(layout):
    files, rel, _func = _real_files(layout)
    new = "srt/layers/flashinfer_workspace.py"
    files[new] = ("from sglang.srt.utils import is_sm90_supported, is_sm100_supported\n\n"
                  "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048\n\n\n"
                  "def flashinfer_allreduce_workspace_size(hidden: int) -> int:\n"
                  "    if not (is_sm90_supported() or is_sm100_supported()):\n        return 0\n"
                  "    return hidden * FUSE_ALLREDUCE_MAX_BATCH_SIZE\n")
    res = _apply_real(files, REAL[layout][0])
    assert res.drift
    assert [(c.file, c.status) for p in res.patches for c in p.checks if c.file == new] == [(new, "incomplete")]


@pytest.mark.parametrize("prebound", ["_is_sm120_supported = (lambda: _is_sm100_supported)()",
                                      "_is_sm120_supported = _is_sm100_supported",
                                      "_is_sm120_supported = False"])
@pytest.mark.parametrize("layout", sorted(REAL))
def test_real_release_helper_name_bound_to_the_wrong_thing_is_not_exit_0(layout, prebound):
    files, rel, func = _real_files(layout)
    text = files[rel]
    at = text.index(f"def {func}(")
    files[rel] = text[:at] + prebound + "\n\n\n" + text[at:]
    res = _apply_real(files, REAL[layout][0])
    assert res.drift and _failed_statuses(res) & {"incomplete", "wrong", "unverified"}


@pytest.mark.parametrize("version", ["0.5.15", "0.5.23"])  # the releases that have the backend check
def test_real_release_renamed_marker_of_an_optional_site_is_drift_not_not_applicable(version):
    """Regression (236f482): an optional site present but unreadable is never not-applicable."""
    from forgepatch.sources import pypi_tree

    pkg = pypi_tree(version).package
    rel = "srt/layers/flashinfer_comm_fusion.py"
    files = {r: (pkg / r).read_text() for r in (*REAL_SUPPORT, rel) if (pkg / r).exists()}
    res = _apply_real(files, version)
    assert sites(res)["backend-check"] == "applied"  # as released
    files[rel] = files[rel].replace("FlashInfer allreduce fusion", "FlashInfer AR fusion")
    res = _apply_real(files, version)
    assert sites(res)["backend-check"] == "drift" and res.drift
