"""The declarative edit kinds (issue 22 item 1) on real release wheels: a series of eleven
patches of mixed kinds (`widen`, `narrow`, `value`, `guard`; docs/examples/patches plus the
shipped widen), each written from a public report of what broke on sm120 / sm121 / sm103, run
for each of those arches on 0.5.10, 0.5.15, 0.5.20 and 0.5.23 with exact expected diffs
(tests/fixtures/edit_kinds), a second run a fixed point, and the arch tests they write
evaluated on every registry arch."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, forgepatch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples" / "patches"
GOLDEN = ROOT / "tests" / "fixtures" / "edit_kinds"
VERSIONS = ("0.5.10", "0.5.15", "0.5.20", "0.5.23")
ARCHES = ("sm120", "sm121", "sm103")


def series_files() -> list[Path]:
    return sorted(EXAMPLES.glob("*.toml")) + [ROOT / "patches" / "sm120-flashinfer-allreduce-fusion.toml"]


def run(arch: str, version: str, tree=None):
    from forgepatch.arch import get_arch
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.patchset import load_patch
    from forgepatch.patching.trees import DirTree
    from forgepatch.sources import pypi_tree

    base = DirTree(pypi_tree(version).package, pristine=True)
    patches = [load_patch(p) for p in series_files()]
    return base, run_patches(tree or base, patches, get_arch(arch), version)


def unified(base, changed: dict[str, str]) -> str:
    out = []
    for rel, new in sorted(changed.items()):
        old = base.read(rel).decode()
        out += difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}", n=1)
    return "".join(out)


def test_the_series_is_ten_patches_of_every_kind():
    import tomllib

    kinds = [tomllib.loads(p.read_text()).get("codemod", "arch-gate") for p in series_files()]
    assert len(kinds) >= 10
    assert {"arch-gate", "narrow", "value", "guard"} <= set(kinds), kinds


# What the per-arch evaluation (issue 21) finds in the example series, and refuses with
# exit 1: for sm121 from 0.5.20 the fp8 narrowing's file reads a FlashInfer API
# (`is_backend_supported(..., get_device_sm())`) the evaluator cannot decide (unverified; a
# gate in a file the patch edits cannot be declared away). Judged as before and since passing,
# each against its golden: sm120 on 0.5.10 (the prefill check is the patch's own site; the
# other trtllm_mha gates of `_handle_attention_backend_compatibility` are other backends'
# checks), sm121 on 0.5.10/0.5.15 (the capability test under `torch.cuda.is_available()`
# adds an atom that changes no arch's value: one function, one text).
REFUSED = {("sm121", "0.5.20"): "unverified", ("sm121", "0.5.23"): "unverified"}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("arch", ARCHES)
def test_series_on_real_wheels(arch, version):
    from forgepatch.patching.model import Status
    from forgepatch.patching.trees import OverlayTree

    base, res = run(arch, version)
    if (arch, version) in REFUSED:
        # refused honestly: exit 1, the finding named, nothing written
        assert res.drift and REFUSED[arch, version] in {loc.status.value for p in res.patches for s in p.sites
                                                        for loc in s.locations}, res.to_json()
        pytest.xfail(f"the evaluation refuses the example series here ({REFUSED[arch, version]}); "
                     "the example patches need the fix named above")
    assert not res.drift and res.verified, res.to_json()
    expected = (GOLDEN / f"{arch}-{version}.diff").read_text()
    assert unified(base, res.changed) == expected
    # every file the run changed compiles, and the reported edits are the changed files
    for rel, text in res.changed.items():
        compile(text, rel, "exec")
    assert set(res.changed) == set().union(*(p.edited_files for p in res.patches))
    if version != VERSIONS[-1]:
        return
    # a second run over the result is a fixed point: nothing changes, nothing is applied again
    _, again = run(arch, version, OverlayTree(base, res.changed))
    assert not again.drift and not again.changed, again.to_json()
    assert not [s for p in again.patches for s in p.sites if s.status is Status.APPLIED]


def test_every_example_of_every_patch_passes():
    r = forgepatch("--patches", EXAMPLES, "patch", "test")
    assert r.rc == 0, r.out + r.err
    names = [ln for ln in r.out.splitlines() if ln.startswith("ok ")]
    import tomllib

    want = sum(len(tomllib.loads(p.read_text()).get("examples", [])) for p in EXAMPLES.glob("*.toml"))
    assert len([n for n in names if any(p.stem in n for p in EXAMPLES.glob("*.toml"))]) == want


# -- the arch tests, evaluated on every registry arch (test double: a stand-in torch.cuda) ----
class _Cuda:
    """Test double for ``torch.cuda`` (no GPU here): reports one registry arch's capability."""

    def __init__(self, cc):
        self.cc = cc

    def is_available(self):
        return self.cc is not None

    def get_device_capability(self, device=None):
        if self.cc is None:
            raise RuntimeError("no CUDA")
        return self.cc


def _admits(code: str, helpers: str = "") -> set[str]:
    import types

    from forgepatch.arch import ARCHES

    out = set()
    for name, arch in ARCHES.items():
        torch = types.SimpleNamespace(cuda=_Cuda(arch.cc))
        ns = {"torch": torch}
        exec(helpers.replace("    import torch\n", ""), ns)
        if eval(code, ns):
            out.add(name)
    torch = types.SimpleNamespace(cuda=_Cuda(None))
    ns = {"torch": torch}
    exec(helpers.replace("    import torch\n", ""), ns)
    assert eval(code, ns) is False  # no CUDA: the test is false, never an exception
    return out


@pytest.mark.parametrize("arches", [("sm103",), ("sm121",), ("sm120",), ("sm100",), ("sm103", "sm121")])
def test_capability_tests_admit_exactly_their_arches(arches):
    from forgepatch.patching import archtest

    class Ctx:  # a file that imports torch, in a tree without exact predicates
        text, rel, state = "import torch\n", "srt/x.py", {}

        @staticmethod
        def read(rel):
            return None

    code, needs = archtest.arch_test(arches, Ctx)
    assert not needs
    assert _admits(code) == set(arches)
    Ctx.text = "import logging\n"  # no torch here: a helper from the registry
    code, needs = archtest.arch_test(arches, Ctx)
    helpers = "".join(archtest.helper_source(n.name, n.arch) for n in needs)
    assert [n.kind for n in needs] == ["helper"] * len(arches)
    assert _admits(code, helpers) == set(arches)


def test_a_family_is_said_with_the_family_predicate():
    from forgepatch.patching import archtest

    class Ctx:
        text, rel, state = "_is_sm120_supported = _is_cuda and is_sm120_supported()\n", "srt/x.py", {}

        @staticmethod
        def read(rel):
            return None

    assert archtest.arch_test(("sm120", "sm121"), Ctx) == ("_is_sm120_supported", [])
    assert archtest.family_of(("sm100", "sm103")) == "sm100"
    assert archtest.family_of(("sm120",)) is None


# -- what would make the kinds lie ------------------------------------------------------------
def _patch(tmp_path, body: str, name="p") -> Path:
    d = tmp_path / "patches"
    d.mkdir(exist_ok=True)
    (d / f"{name}.toml").write_text(f'id = "{name}"\nsummary = "s"\n' + body)
    return d


def test_a_value_place_holding_another_value_is_not_edited(tmp_path):
    """`from` names what the place must hold: on 0.5.20 the SM120 default already is "cutlass",
    so a required site finds no place (drift, exit 1), never a silent edit of another branch."""
    d = _patch(tmp_path, 'arches = ["sm120"]\ncodemod = "value"\n[[sites]]\nname = "v"\n'
               'functions = ["initialize_fp8_gemm_config"]\nmodules = ["srt/layers/quantization/fp8_utils.py"]\n'
               'assign = "backend"\nfrom = "triton"\nvalue = "cutlass"\n')
    from forgepatch.arch import get_arch
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.patchset import load_patch
    from forgepatch.patching.trees import DirTree
    from forgepatch.sources import pypi_tree

    tree = DirTree(pypi_tree("0.5.20").package, pristine=True)
    res = run_patches(tree, [load_patch(d / "p.toml")], get_arch("sm120"), "0.5.20")
    assert res.drift and not res.changed
    assert res.patches[0].sites[0].status.value == "drift"


def test_narrow_gates_one_refuses_two_checks(tmp_path):
    d = _patch(tmp_path, 'arches = ["sm103"]\ncodemod = "narrow"\n[[sites]]\nname = "n"\nfunctions = ["f"]\n'
               'gates = "one"\n[[examples]]\nbefore = """\ndef f():\n    if is_sm100_supported():\n        a()\n'
               '    if is_sm100_supported():\n        b()\n"""\nafter = "x = 1\\n"\n')
    r = forgepatch("--patches", d, "patch", "test", "p")
    assert r.rc == 1 and "ambiguous: 2 sm100 checks" in r.out, r.out + r.err


@pytest.mark.parametrize("body,needle", [
    ('codemod = "value"\n[[sites]]\nname = "v"\nfunctions = ["f"]\nassign = "x"\nkeyword = "y"\nvalue = 1\n',
     "exactly one of assign, keyword, default, returns"),
    ('codemod = "value"\n[[sites]]\nname = "v"\nfunctions = ["f"]\nassign = "x"\n', "sites[0].value: needed"),
    ('codemod = "guard"\n[[sites]]\nname = "g"\nfunctions = ["f"]\nstatement = "x = ("\n', "sites[0].statement: not Python"),
    ('codemod = "guard"\n[[sites]]\nname = "g"\nfunctions = ["f"]\nstatement = "x = 1"\nwhen = ["sm999"]\n',
     "unknown arch 'sm999'"),
    ('codemod = "narrow"\n[[sites]]\nname = "n"\nfunctions = ["f"]\nvalue = 1\n', "sites[0].value: unknown key"),
    ('codemod = "narrow"\n[[sites]]\nname = "n"\nfunctions = ["f"]\nfamily = "sm120"\npredicates = ["is_blackwell"]\n',
     "'family' or 'predicates', not both"),
])
def test_bad_kind_keys_are_one_line_errors(tmp_path, body, needle):
    d = _patch(tmp_path, 'arches = ["sm120"]\n' + body)
    r = forgepatch("--patches", d, "patch", "test", "p")
    assert_one_line_error(r, 2, needle, "p.toml:")


@pytest.mark.parametrize("version,where,test", [
    ("0.5.15", "    backend = Fp8GemmRunnerBackend(backend)\n",
     "(torch.cuda.is_available() and torch.cuda.get_device_capability() == (12, 1))"),
    ("0.5.23", "    backend = Fp8GemmRunnerBackend(backend)\n", "is_sm121()"),
])
def test_guard_before_a_marked_statement_on_a_real_wheel(tmp_path, version, where, test):
    """`before`: the guard goes right before the first statement naming the marker, in the
    block that holds it; the marked statement and the rest stay as they were."""
    from forgepatch.arch import get_arch
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.patchset import load_patch
    from forgepatch.patching.trees import DirTree
    from forgepatch.sources import pypi_tree

    d = _patch(tmp_path, 'arches = ["sm121"]\ncodemod = "guard"\n[[sites]]\nname = "g"\n'
               'functions = ["initialize_fp8_gemm_config"]\nmodules = ["srt/layers/quantization/fp8_utils.py"]\n'
               'before = "Fp8GemmRunnerBackend"\ncondition = \'backend == "cutlass"\'\nstatement = \'backend = "triton"\'\n')
    tree = DirTree(pypi_tree(version).package, pristine=True)
    res = run_patches(tree, [load_patch(d / "p.toml")], get_arch("sm121"), version)
    assert not res.drift, res.to_json()
    rel = "srt/layers/quantization/fp8_utils.py"
    old, new = tree.read(rel).decode(), res.changed[rel]
    guard = f'    if backend == "cutlass" and {test}:\n        backend = "triton"\n'
    assert old.count(where) == 1 and new.count(guard + where) == 1
    assert new.replace(guard, "", 1).replace("    is_sm121,\n", "", 1) == old


def test_value_places_keyword_default_and_return(tmp_path):
    body = '''arches = ["sm120", "sm121"]
codemod = "value"

[[sites]]
name = "kw"
functions = ["make"]
keyword = "num_stages"
value = 2

[[sites]]
name = "default"
functions = ["run"]
default = "backend"
value = "triton"

[[sites]]
name = "ret"
functions = ["pick"]
returns = true
markers = ["trtllm"]
value = "flashinfer"

[[examples]]
context = { "srt/utils.py" = "def is_sm120_supported(): ...\\n" }
before = """
from sglang.srt.utils import is_sm120_supported


def make():
    return launch(num_stages=3)


def run(backend="trtllm"):
    pass


def pick(x):
    if x:
        return "trtllm"
    return "fa3"
"""
after = """
from sglang.srt.utils import is_sm120_supported


def make():
    return launch(num_stages=2 if is_sm120_supported() else 3)


def run(backend="triton" if is_sm120_supported() else "trtllm"):
    pass


def pick(x):
    if x:
        return "flashinfer" if is_sm120_supported() else "trtllm"
    return "fa3"
"""
'''
    d = _patch(tmp_path, body)
    r = forgepatch("--patches", d, "patch", "test", "p")
    assert r.rc == 0, r.out + r.err


def test_narrow_keeps_the_rest_of_an_or_chain_and_a_mixed_check(tmp_path):
    """Only the family predicate is narrowed: `is_sm90 or (is_sm100 and not T)`; the mixed
    `nnodes == 1 or ...` keeps its other operand (a wrong edit here would be a silent one)."""
    d = tmp_path / "patches"
    d.mkdir()
    body = (ROOT / "tests" / "fixtures" / "edit_kinds" / "narrow-or-chain.toml").read_text()
    (d / "q.toml").write_text(body)
    r = forgepatch("--patches", d, "patch", "test", "q")
    assert r.rc == 0, r.out + r.err
