"""Truth by evaluation (issue 21): generated arch-gate shapes around the sm120 fusion gate.

Every generated tree is either patched correctly or `apply` fails (drift / incomplete /
unverified / wrong); never exit 0 with a tree that rejects sm120 or changes another arch.
"Correctly" is checked independently of the verifier: the written tree is imported and
RUN once per registry arch, with a stand-in ``torch`` module whose
``cuda.get_device_capability()`` returns that arch's compute capability (the one test
double: no GPU here), and the feature's functions are called. sm120/sm121 must fuse
exactly when sm100 does; sm90/sm100/sm103 must behave as they did before the patch.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forgepatch.arch import ARCHES, get_arch
from forgepatch.paths import SHIPPED_PATCHES
from forgepatch.patching.engine import run_patches
from forgepatch.patching.patchset import load_patches
from forgepatch.patching.trees import MemoryTree

PATCHES = load_patches(SHIPPED_PATCHES, ["sm120-flashinfer-allreduce-fusion"])
COMM = "srt/layers/communicator.py"
WORKSPACE = "srt/layers/flashinfer_workspace.py"
FAILED = {"drift", "incomplete", "unverified", "wrong"}

UTILS = '''import torch


def is_cuda():
    return torch.cuda.is_available()


def is_sm90_supported(device=None):
    return torch.cuda.get_device_capability(device)[0] == 9


def is_sm100_supported(device=None):
    return torch.cuda.get_device_capability(device)[0] == 10


def is_sm110_supported(device=None):
    return torch.cuda.get_device_capability(device)[0] == 11


def is_sm120_supported(device=None):
    return torch.cuda.get_device_capability(device)[0] == 12
'''

# the arch test, spelled the ways a refactor would spell "sm90 or sm100"
ARCH_TESTS = {
    "constants": ("_is_sm90_supported or _is_sm100_supported", "", ""),
    "calls": ("is_sm90_supported() or is_sm100_supported()", "", ""),
    "tuple membership": ("torch.cuda.get_device_capability()[0] in (9, 10)", "", ""),
    "set membership": ("torch.cuda.get_device_capability() in {(9, 0), (10, 0), (10, 3)}", "", ""),
    "de morgan": ("not (not _is_sm90_supported and not _is_sm100_supported)", "", ""),
    "newer sibling": ("is_sm90_supported() or is_sm100_supported() or is_sm110_supported()",
                      ", is_sm110_supported", ""),
    "aliases": ("_sm90() or _sm100()", "", "from sglang.srt.utils import is_sm90_supported as _sm90, "
                                           "is_sm100_supported as _sm100\n"),
    "lambda": ("_fusion_arch()", "", "_fusion_arch = lambda: is_sm90_supported() or is_sm100_supported()\n"),
    "elif helper": ("_fusion_arch()", "", '''def _fusion_arch():
    if is_sm90_supported():
        return True
    elif is_sm100_supported():
        return True
    return False
'''),
    "cached helper": ("_fusion_arch()", "", '''@functools.lru_cache(maxsize=1)
def _fusion_arch():
    return is_sm90_supported() or is_sm100_supported()
'''),
    "decorated helper": ("_fusion_arch()", "", '''def _remember(fn):
    return fn


@_remember
def _fusion_arch():
    return is_sm90_supported() or is_sm100_supported()
'''),
    "match helper": ("_fusion_arch()", "", '''def _fusion_arch():
    match torch.cuda.get_device_capability()[0]:
        case 9 | 10:
            return True
        case _:
            return False
'''),
    "property": ("_PLATFORM.fusion_arch", "", '''class _Platform:
    @property
    def fusion_arch(self):
        return is_sm90_supported() or is_sm100_supported()


_PLATFORM = _Platform()
'''),
}

# where the test sits in the feature function
BODIES = {
    "inline": '''    return (
        ({A})
        and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE
        and get_global_server_args().enable_flashinfer_allreduce_fusion
    )
''',
    "early return": '''    if not ({A}):
        return False
    return batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE and get_global_server_args().enable_flashinfer_allreduce_fusion
''',
    "elif per arch": '''    if _is_sm90_supported:
        arch_ok = True
    elif _is_sm100_supported:
        arch_ok = True
    else:
        arch_ok = False
    return arch_ok and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE and get_global_server_args().enable_flashinfer_allreduce_fusion
''',
    "nested function": '''    def arch_ok():
        return {A}

    return arch_ok() and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE and get_global_server_args().enable_flashinfer_allreduce_fusion
''',
}

# what the name the codemod would add is already bound to in the module
PREBOUND = {
    "nothing": "",
    "lambda that tests sm100": "_is_sm120_supported = (lambda: is_sm100_supported())()\n",
    "alias of the sm100 function": "is_sm120_supported = is_sm100_supported\n",
    "false flag": "_is_sm120_supported = False\n",
    "right flag": "_is_sm120_supported = _is_cuda and torch.cuda.get_device_capability()[0] == 12\n",
}

WORKSPACE_MODULE = '''from sglang.srt.utils import is_sm90_supported, is_sm100_supported

FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048


def flashinfer_allreduce_workspace_size(hidden: int) -> int:
    if not (is_sm90_supported() or is_sm100_supported()):
        return 0
    return hidden * FUSE_ALLREDUCE_MAX_BATCH_SIZE
'''


def communicator(test: str, body: str, prebound: str) -> str:
    expr, extra_import, helper = ARCH_TESTS[test]
    return (
        "import functools\n\nimport torch\n\n"
        f"from sglang.srt.utils import is_cuda, is_sm90_supported, is_sm100_supported{extra_import}\n"
        + (helper if helper.startswith("from ") else "")
        + "\nFUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048\n"
        "_is_cuda = is_cuda()\n"
        "_is_sm90_supported = _is_cuda and is_sm90_supported()\n"
        "_is_sm100_supported = _is_cuda and is_sm100_supported()\n"
        + PREBOUND[prebound]
        + "\n\n" + ("" if helper.startswith("from ") else helper) + "\n\n"
        "class _Args:\n    enable_flashinfer_allreduce_fusion = True\n\n\n"
        "def get_global_server_args():\n    return _Args()\n\n\n"
        "def apply_flashinfer_allreduce_fusion(batch_size: int):\n"
        + BODIES[body].replace("{A}", expr)
    )


# -- the independent check: run the tree on each arch ----------------------------------------
def _fake_torch(cc: tuple[int, int]) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: True, get_device_capability=lambda device=None: cc)
    torch.version = types.SimpleNamespace(cuda="12.9", hip=None)
    return torch


def behaviour(files: dict[str, str], root: Path) -> dict[str, tuple]:
    """arch -> (fusion at batch 1, workspace size or None): the tree run on that arch."""
    pkg = root / "sglang"
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for d in [pkg, *[p for p in pkg.rglob("*") if p.is_dir()]]:
        (d / "__init__.py").touch()
    out = {}
    saved = sys.modules.get("torch")
    sys.path.insert(0, str(root))
    try:
        for name, arch in ARCHES.items():
            for mod in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
                del sys.modules[mod]
            sys.modules["torch"] = _fake_torch(arch.cc)
            importlib.invalidate_caches()
            comm = importlib.import_module("sglang.srt.layers.communicator")
            fused = bool(comm.apply_flashinfer_allreduce_fusion(1))
            size = None
            if WORKSPACE in files:
                size = importlib.import_module("sglang.srt.layers.flashinfer_workspace").flashinfer_allreduce_workspace_size(4)
            out[name] = (fused, size)
    finally:
        sys.path.remove(str(root))
        for mod in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[mod]
        if saved is not None:
            sys.modules["torch"] = saved
        else:
            sys.modules.pop("torch", None)
    return out


def promise_holds(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """What is wrong with the written tree's behaviour (empty: the patch's promise holds)."""
    bad = []
    for name, arch in ARCHES.items():
        want = before["sm100"] if arch.gate_family == "sm120" else before[name]
        if after[name] != want:
            bad.append(f"{name}: {after[name]} (want {want})")
    return bad


def _run(files: dict[str, str]):
    tree = {"srt/utils.py": UTILS, **files}
    return run_patches(MemoryTree(tree, pristine=True), PATCHES, get_arch("sm120"), None)


shapes = st.tuples(st.sampled_from(sorted(ARCH_TESTS)), st.sampled_from(sorted(BODIES)),
                   st.sampled_from(sorted(PREBOUND)), st.booleans())


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes)
def test_generated_gate_shapes_are_patched_right_or_refused(shape, tmp_path_factory):
    test, body, prebound, new_module = shape
    files = {COMM: communicator(test, body, prebound)}
    if new_module:
        files[WORKSPACE] = WORKSPACE_MODULE
    res = _run(files)
    before = behaviour({"srt/utils.py": UTILS, **files}, tmp_path_factory.mktemp("before"))
    assert before["sm90"][0] and before["sm100"][0] and not before["sm120"][0]  # the generator's premise
    if res.drift:
        assert res.status in FAILED, res.status
        return
    written = {"srt/utils.py": UTILS, **files, **res.changed}
    after = behaviour(written, tmp_path_factory.mktemp("after"))
    assert not promise_holds(before, after), (shape, promise_holds(before, after), res.changed.get(COMM))


def statuses(res) -> set[str]:
    return {loc.status.value for p in res.patches for s in p.sites for loc in s.locations}


def test_known_shape_is_patched_and_runs_right(tmp_path):
    files = {COMM: communicator("constants", "inline", "nothing")}
    res = _run(files)
    assert not res.drift, res.status
    before = behaviour({"srt/utils.py": UTILS, **files}, tmp_path / "b")
    after = behaviour({"srt/utils.py": UTILS, **files, **res.changed}, tmp_path / "a")
    assert not promise_holds(before, after)
    checks = res.patches[0].checks
    assert checks and all(c.status == "ok" for c in checks)
    gate = next(c for c in checks if c.function == "apply_flashinfer_allreduce_fusion")
    assert gate.before["sm120"] == "False" and gate.after["sm120"] == gate.after["sm100"]  # typed, per arch


def test_new_module_gate_of_the_feature_is_seen():
    res = _run({COMM: communicator("constants", "inline", "nothing"), WORKSPACE: WORKSPACE_MODULE})
    assert res.drift and "incomplete" in statuses(res)
    bad = [c for c in res.patches[0].checks if c.status == "incomplete"]
    assert [(c.file, c.function) for c in bad] == [(WORKSPACE, "flashinfer_allreduce_workspace_size")]


def test_unreadable_decorator_is_unverified_with_file_and_line():
    res = _run({COMM: communicator("decorated helper", "inline", "nothing")})
    assert res.drift
    found = [loc for p in res.patches for s in p.sites for loc in s.locations if loc.status.value == "unverified"]
    assert found and found[0].file == COMM and found[0].line


def test_elif_per_arch_is_not_passed_gate_by_gate():
    res = _run({COMM: communicator("constants", "elif per arch", "nothing")})
    assert res.drift and statuses(res) & {"incomplete", "drift"}


def test_wrong_prebound_helper_is_not_exit_0():
    for prebound in ("lambda that tests sm100", "alias of the sm100 function", "false flag"):
        res = _run({COMM: communicator("constants", "inline", prebound)})
        assert res.drift, prebound


LIAR = '''"""A custom codemod that says the gate is absorbed upstream, without looking."""
from forgepatch.patching import SiteCodemod, Status

PATCH = {
    "id": "absorbed-liar",
    "summary": "claims the sm120 fusion gate is absorbed upstream",
    "arches": ["sm120", "sm121"],
    "sites": [{"name": "runtime", "functions": ["apply_flashinfer_allreduce_fusion"],
               "markers": ["FUSE_ALLREDUCE_MAX_BATCH_SIZE"]}],
}


class Codemod(SiteCodemod):
    def edit_function(self, func, site, symbol, ctx):
        ctx.report(site.name, Status.ABSORBED, func, symbol, "gate already accepts sm120")
        return None
'''


def test_a_custom_codemods_absorbed_claim_is_checked_by_evaluation(tmp_path):
    (tmp_path / "absorbed-liar.py").write_text(LIAR)
    liar = load_patches(tmp_path, ["absorbed-liar"])
    tree = {"srt/utils.py": UTILS, COMM: communicator("constants", "inline", "nothing")}
    res = run_patches(MemoryTree(tree, pristine=True), liar, get_arch("sm120"), None)
    assert res.drift and "incomplete" in statuses(res)
    (bad,) = [c for c in res.patches[0].checks if c.status == "incomplete"]
    assert "absorbed upstream" in bad.reason and bad.function == "apply_flashinfer_allreduce_fusion"
    # and where upstream really accepts sm120, the same claim stands
    fixed = {**tree, COMM: tree[COMM].replace("(_is_sm90_supported or _is_sm100_supported)",
                                              "(_is_sm90_supported or _is_sm100_supported or is_sm120_supported())")}
    fixed[COMM] = fixed[COMM].replace("is_sm100_supported\n", "is_sm100_supported, is_sm120_supported\n", 1)
    ok = run_patches(MemoryTree(fixed, pristine=True), liar, get_arch("sm120"), None)
    assert not ok.drift, statuses(ok)
