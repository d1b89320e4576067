"""Helper provisioning by binding kind (issue 21 item 4): the sm120 patch's helper name
(``_is_sm120_supported``, the module constant the runtime fusion gate's siblings are) is
already bound in the real release file, in one of the ways Python allows. The codemod calls
a function, uses a flag as a flag, and refuses (``unverified``, with the binding's line,
exit 1, nothing written) what it cannot classify: never an uncalled callable, never an
unbound name. Built on the real 0.5.10 (communicator) and 0.5.23 (layer_boundary) trees."""

from __future__ import annotations

import ast
import symtable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forgepatch.arch import get_arch
from forgepatch.paths import SHIPPED_PATCHES
from forgepatch.patching.engine import run_patches
from forgepatch.patching.patchset import load_patches
from forgepatch.patching.trees import MemoryTree

PATCHES = load_patches(SHIPPED_PATCHES, ["sm120-flashinfer-allreduce-fusion"])
REAL = {  # release -> (runtime file, site function)
    "0.5.10": ("srt/layers/communicator.py", "apply_flashinfer_allreduce_fusion"),
    "0.5.23": ("srt/layers/layer_boundary/residual/add_norm.py", "flashinfer_ar_fusion_applies"),
}
SUPPORT = ("srt/utils/__init__.py", "srt/utils/common.py", "srt/runtime_context.py")
GATE = "(_is_sm90_supported or _is_sm100_supported)"
NAME = "_is_sm120_supported"
TEST = "_is_cuda and torch.cuda.get_device_capability()[0] == 12"  # the file imports torch

# how the helper name is already bound (inserted above the site function) -> what must happen:
# "call" (widened with `_is_sm120_supported()`), "flag" (widened with the bare name) or
# "unverified" (refused, the binding's line named)
SHAPES = {
    "lambda": (f"{NAME} = lambda: {TEST}\n", "call"),
    "alias of a def": (f"def _sm120_check():\n    return {TEST}\n\n\n{NAME} = _sm120_check\n", "call"),
    "alias of an imported predicate": ("from sglang.srt.utils import is_sm120_supported as _sm120\n\n"
                                       f"{NAME} = _sm120\n", "call"),
    "imported under the name": (f"from sglang.srt.utils import is_sm120_supported as {NAME}\n", "call"),
    "partial": ("import functools\n\n\ndef _major_is(major):\n"
                "    return _is_cuda and torch.cuda.get_device_capability()[0] == major\n\n\n"
                f"{NAME} = functools.partial(_major_is, 12)\n", "call"),
    "lru_cache def": (f"import functools\n\n\n@functools.lru_cache(maxsize=1)\ndef {NAME}() -> bool:\n"
                      f"    return {TEST}\n", "call"),
    "lru_cache of a partial, as sglang.srt.utils spells it": (
        "from functools import lru_cache, partial\n\nfrom sglang.srt.utils.common import _check_cuda_device_version\n\n"
        f"{NAME} = lru_cache(maxsize=1)(partial(_check_cuda_device_version, device_capability_majors=[12], "
        "cuda_version=(12, 8)))\n", "call"),
    "import with a flag fallback": (f"try:\n    from sglang.srt.utils import is_sm120_supported as {NAME}\n"
                                    f"except ImportError:\n    {NAME} = False\n", "unverified"),
    "bool constant": (f"{NAME} = {TEST}\n", "flag"),
    "stored result of an imported predicate": ("from sglang.srt.utils import is_sm120_supported\n\n"
                                               f"{NAME} = is_sm120_supported()\n", "flag"),
    "conditional flag, both branches": (f"if _is_cuda:\n    {NAME} = torch.cuda.get_device_capability()[0] == 12\n"
                                        f"else:\n    {NAME} = False\n", "flag"),
    "conditional double binding of two kinds": (f"if _is_cuda:\n\n    def {NAME}():\n        return {TEST}\n\n"
                                                f"else:\n    {NAME} = False\n", "unverified"),
    "later rebinding of another kind": (f"{NAME} = False\n{NAME} = lambda: {TEST}\n", "unverified"),
    "attribute of an object": (f"{NAME} = torch.cuda.sm120_probe\n", "unverified"),
    "result of an unknown call": (f"{NAME} = torch.cuda.make_probe(12)\n", "unverified"),
    "property at module level": (f"@property\ndef {NAME}():\n    return {TEST}\n", "unverified"),
}


def _files(version: str) -> tuple[dict[str, str], str, str]:
    from forgepatch.sources import pypi_tree

    rel, func = REAL[version]
    pkg = pypi_tree(version).package
    return {r: (pkg / r).read_text() for r in (*SUPPORT, rel) if (pkg / r).exists()}, rel, func


def _bind(text: str, func: str, snippet: str) -> tuple[str, int]:
    """``text`` with ``snippet`` above ``def func(``, and the snippet's first line."""
    at = text.index(f"\ndef {func}(") + 1
    return text[:at] + snippet + "\n\n" + text[at:], text[:at].count("\n") + 1


def _run(files: dict[str, str], version: str):
    return run_patches(MemoryTree(files, pristine=True), PATCHES, get_arch("sm120"), version)


def _locations(res, status: str):
    return [loc for p in res.patches for s in p.sites for loc in s.locations if loc.status.value == status]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("version", sorted(REAL))
def test_an_existing_binding_of_the_helper_name_is_called_used_or_refused(version, shape):
    files, rel, func = _files(version)
    snippet, expect = SHAPES[shape]
    files[rel], first = _bind(files[rel], func, snippet)
    res = _run(files, version)
    if expect == "unverified":
        assert res.drift and rel not in res.changed and not res.changed, shape  # exit 1, nothing written
        (loc,) = _locations(res, "unverified")
        assert loc.file == rel and NAME in loc.detail
        assert first <= loc.line < first + snippet.count("\n"), (loc.line, first)  # the binding's line
        return
    assert not res.drift, (shape, res.to_json())
    new = res.changed[rel]
    compile(new, rel, "exec")
    # Python's own reading of the written module: the name is a global it binds (no NameError)
    symbol = symtable.symtable(new, rel, "exec").lookup(NAME)
    assert symbol.is_assigned() or symbol.is_imported()
    # a function is called, a flag is not (what the name is, read off the shape by hand)
    widened = f"(_is_sm90_supported or _is_sm100_supported or {NAME}{'()' if expect == 'call' else ''})"
    assert widened in new, shape
    for binder in (f"{NAME} =", f"def {NAME}(", f" as {NAME}"):  # nothing bound a second time
        assert new.count(binder) == files[rel].count(binder), binder
    # the verifier's per-arch evaluation: sm120 admitted as sm100, every other arch unchanged
    checks = [c for p in res.patches for c in p.checks]
    assert checks and all(c.status == "ok" for c in checks), [c.to_json() for c in checks]


# -- the classifier itself, over generated binding shapes (parse only: fast) -----------------
FUNCTION, BOOL, UNKNOWN = "function", "bool", "unknown"
_RHS = {  # right-hand side -> kind
    "lambda: major == 12": FUNCTION,
    "_helper": FUNCTION,
    "functools.partial(_helper, 12)": FUNCTION,
    "partial(_helper, 12)": FUNCTION,
    "lru_cache(maxsize=1)(partial(_helper, 12))": FUNCTION,
    "functools.lru_cache(_helper)": FUNCTION,
    "True": BOOL,
    "not _flag": BOOL,
    "_flag and major == 12": BOOL,
    "major >= 12": BOOL,
    "_helper()": BOOL,  # a predicate's result
    "_flag": BOOL,
    "obj.attr": UNKNOWN,
    "make()": UNKNOWN,
    "_obj()": UNKNOWN,  # a call of a function not known to return a flag
}
_DEFS = ("import functools\nfrom functools import lru_cache, partial\n\n"
         "def _helper(major=12) -> bool:\n    return major == 12\n\n"
         "def _obj():\n    return object()\n\n"
         "_flag = major == 12\n")
_WRAP = {
    "plain": "{b}",
    "if": "if cond:\n    {b}\n",
    "if/else same": "if cond:\n    {b}\nelse:\n    {b}\n",
    "try": "try:\n    {b}\nexcept ImportError:\n    {b}\n",
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.sampled_from(sorted(_RHS)), second=st.sampled_from(sorted(_RHS)), wrap=st.sampled_from(sorted(_WRAP)),
       twice=st.booleans())
def test_classifier_over_generated_binding_shapes(first, second, wrap, twice):
    from forgepatch.patching.bindings import binding

    body = _WRAP[wrap].replace("{b}", f"x = {first}", 1).replace("{b}", f"x = {second}")
    text = _DEFS + body + (f"\nx = {second}\n" if twice else "")
    ast.parse(text)
    kinds = {_RHS[first]} | ({_RHS[second]} if twice or body.count("x = ") == 2 else set())
    got = binding(text, "x")
    assert got is not None
    want = kinds.pop() if len(kinds) == 1 else UNKNOWN
    assert got.kind == want, (text, got)
    if got.kind == UNKNOWN:
        assert got.line >= text[:text.index("x = ")].count("\n") + 1  # a line of one of the bindings


@pytest.mark.parametrize("version", sorted(REAL))
def test_bindings_are_followed_through_the_real_tree(version):
    """Imports resolve through the release's own modules: ``is_sm120_supported`` is
    ``lru_cache(maxsize=1)(partial(_check_cuda_device_version, ...))`` in its utils (a
    predicate); an import with a callable fallback is one function; a stored result of the
    predicate is a flag; the same import with a flag fallback is unknown at the fallback."""
    from forgepatch.patching.bindings import resolved

    files, rel, func = _files(version)
    read = files.get
    imp = "from sglang.srt.utils import is_sm120_supported\n"
    cases = {
        imp: ("is_sm120_supported", FUNCTION),
        imp + "x = is_sm120_supported()\n": ("x", BOOL),
        imp + "x = is_sm120_supported\n": ("x", FUNCTION),
        "try:\n    from sglang.srt.utils import is_sm120_supported as x\nexcept ImportError:\n    x = lambda: False\n":
            ("x", FUNCTION),
        "try:\n    from sglang.srt.utils import is_sm120_supported as x\nexcept ImportError:\n    x = False\n": ("x", UNKNOWN),
    }
    for snippet, (name, kind) in cases.items():
        text, first = _bind(files[rel], func, snippet)
        got = resolved(read, rel, text, name)
        assert got is not None and got.kind == kind, (snippet, got)
        assert first <= got.line < first + snippet.count("\n")


def test_an_unclassifiable_binding_on_the_cli_exits_1_names_the_line_and_writes_nothing(tmp_path):
    import shutil

    from forgepatch.sources import pypi_tree
    from tests.support.cli import forgepatch

    rel, func = REAL["0.5.23"]
    root = tmp_path / "tree"
    shutil.copytree(pypi_tree("0.5.23").package, root / "sglang")
    target = root / "sglang" / rel
    text, first = _bind(target.read_text(), func, f"{NAME} = torch.cuda.make_probe(12)\n")
    target.write_text(text)
    before = {p: p.read_bytes() for p in root.rglob("*.py")}
    run = forgepatch("apply", "--arch", "sm120", "--source", root, "--in-place")
    assert run.rc == 1 and "Traceback" not in run.err
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == before  # nothing written
    assert "unverified" in run.out + run.err
    assert f"{rel}:{first}" in " ".join((run.out + run.err).split())  # the binding's file:line


# -- the evaluator, when upstream already names the helper in the gate -------------------------
# The gate already reads `_is_sm120_supported`; what the name is bound to decides whether sm120
# is admitted. A definition that reads no arch says nothing about sm120, whatever its name: the
# verifier must not take the name's family for its value (it did: an environment flag passed as
# "gate already accepts sm120", no gate rejecting, exit 0).
UPSTREAM_WIDENED = f"(_is_sm90_supported or _is_sm100_supported or {NAME})"
NOT_AN_ARCH_READ = {
    "environment flag": f"import os\n\n{NAME} = bool(int(os.environ.get('SGLANG_FUSION_SM12X', '0')))\n",
    "setting of an object": f"{NAME} = torch.backends.cuda.matmul.allow_tf32\n",
    "result of an unknown call": f"{NAME} = torch.cuda.make_probe(12)\n",
}


@pytest.mark.parametrize("shape", sorted(NOT_AN_ARCH_READ))
@pytest.mark.parametrize("version", sorted(REAL))
def test_a_helper_named_for_sm120_that_reads_no_arch_is_never_admitted_by_its_name(version, shape):
    files, rel, func = _files(version)
    assert GATE in files[rel]
    files[rel] = files[rel].replace(GATE, UPSTREAM_WIDENED, 1)
    files[rel], _first = _bind(files[rel], func, NOT_AN_ARCH_READ[shape])
    res = _run(files, version)
    assert res.drift and not res.changed, (shape, res.to_json())  # exit 1, nothing written
    gate_line = files[rel].splitlines().index(next(ln for ln in files[rel].splitlines() if UPSTREAM_WIDENED in ln)) + 1
    found = _locations(res, "unverified") + _locations(res, "incomplete")
    assert any(loc.file == rel and loc.line == gate_line for loc in found), [loc.to_json() for loc in found]


@pytest.mark.parametrize("version", sorted(REAL))
def test_a_helper_named_for_sm120_that_tests_sm120_is_already_applied(version):
    """The control: the same gate, the helper defined by an arch read -> already applied, exit 0."""
    files, rel, func = _files(version)
    files[rel] = files[rel].replace(GATE, UPSTREAM_WIDENED, 1)
    files[rel], _first = _bind(files[rel], func, f"{NAME} = {TEST}\n")
    res = _run(files, version)
    checks = [c for p in res.patches for c in p.checks]
    site = next(s for p in res.patches for s in p.sites if s.site == "runtime-fusion-gate")
    assert site.status.value in ("already-applied", "absorbed-upstream"), res.to_json()
    assert not [c for c in checks if c.file == rel and c.status != "ok"], [c.to_json() for c in checks]
