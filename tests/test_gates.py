"""`forgepatch gates`: the arch-gate inventory of real SGLang releases (PyPI wheels, cached) and
its diff across pins, every asserted arch set checked against the release's own source text;
plus a small tree written here for the evaluator's rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from forgepatch.gates.diff import diff, normalise
from forgepatch.gates.inventory import inventory
from forgepatch.gates.scan import FUNC_SPLIT
from support.cli import assert_one_line_error, forgepatch

ALL = ["sm90", "sm100", "sm103", "sm120", "sm121"]


def release(version: str) -> Path:
    from forgepatch.sources import resolve_source

    return Path(resolve_source(f"pypi:{version}").package)


@pytest.fixture(scope="module")
def inventories():
    cache = {}

    def get(version: str):
        if version not in cache:
            cache[version] = inventory(release(version), f"pypi:{version}", version)
        return cache[version]

    return get


def source_lines(version: str, gate) -> str:
    """The release's source lines of a gate's condition (for a predicate: its definition's
    first lines), whitespace collapsed."""
    lines = (release(version) / gate.file).read_text().splitlines()
    end = max(getattr(gate, "end_line", 0), gate.line + 6)
    return " ".join(" ".join(lines[gate.line - 1: end]).split())


def one(gates, **match):
    found = [g for g in gates if all(getattr(g, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, [(g.where, g.function, g.expr) for g in found])
    return found[0]


# -- the evaluator's rules, on a tree written here ---------------------------------------
UTILS = '''
import torch
from functools import lru_cache, partial


def is_cuda():
    return torch.cuda.is_available()


def _check_cuda_device_version(device_capability_majors, cuda_version):
    if not is_cuda():
        return False
    return torch.cuda.get_device_capability()[0] in device_capability_majors and (
        tuple(map(int, torch.version.cuda.split(".")[:2])) >= cuda_version)


is_blackwell_supported = is_blackwell = lru_cache(maxsize=1)(
    partial(_check_cuda_device_version, device_capability_majors=[10, 11, 12], cuda_version=(12, 8))
)
is_sm100_supported = lru_cache(maxsize=1)(
    partial(_check_cuda_device_version, device_capability_majors=[10], cuda_version=(12, 8))
)


@lru_cache(maxsize=1)
def is_sm120() -> bool:
    return is_cuda() and torch.cuda.get_device_capability() == (12, 0)


_PROBES = {"is_sm100": "is_sm100_supported", "is_blackwell": "is_blackwell_supported",
           "device_capability": "get_device_capability"}
'''

FEATURE = '''
import torch
from pkg.utils import is_blackwell_supported, is_sm100_supported, is_sm120, get_platform

_is_sm100_supported = is_sm100_supported()
ENABLE_FOO = False  # a flag: says nothing about the value at a gate


def pick_backend(args):
    if (_is_sm100_supported or get_platform().is_blackwell) and args.enable_fusion:
        args.fusion_backend = "trtllm"
    if view.nnodes == 1 or is_sm100_supported():
        args.use_mnnvl = True
    if ENABLE_FOO and is_sm120():
        args.foo = True
    major, minor = torch.cuda.get_device_capability()
    if major in (9, 10) and minor == 0:
        args.wgmma = True
    jit(supported_major_versions=[9, 10])


class Runner:
    def __init__(self):
        self.sm_major = torch.cuda.get_device_capability()[0]

    def run(self):
        if self.sm_major >= 12:
            return "consumer"
'''


def _tree(tmp_path: Path, feature: str) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text(UTILS)
    (pkg / "feature.py").write_text(feature)
    return pkg


def test_rules_on_a_written_tree(tmp_path):
    inv = inventory(_tree(tmp_path, FEATURE), "dir:test", None)
    preds = {p.name: p.arches for p in inv.predicates if p.file == "utils.py"}
    assert preds["is_blackwell_supported"] == ["sm100", "sm103", "sm120", "sm121"]
    assert preds["is_blackwell"] == preds["is_blackwell_supported"]  # a = b = ... both names
    assert preds["is_sm100_supported"] == ["sm100", "sm103"]  # major == 10: B300 passes sm100 gates
    assert preds["is_sm120"] == ["sm120"]  # == (12, 0): not sm121

    fusion = one(inv.gates, function="pick_backend", line=10)
    assert fusion.arches == ["sm100", "sm103", "sm120", "sm121"]
    assert fusion.verdicts["sm100"] == "conditional" and fusion.verdicts["sm90"] == "never"  # and args.enable_fusion
    assert set(fusion.atoms) == {"_is_sm100_supported", "get_platform().is_blackwell"}
    assert "fusion_backend" in fusion.markers and "enable_fusion" in fusion.markers
    mixed = one(inv.gates, function="pick_backend", line=12)  # view.nnodes == 1 or ...: never excludes an arch
    assert mixed.arches == ALL and mixed.verdicts["sm100"] == "always" and mixed.verdicts["sm90"] == "conditional"
    flag = one(inv.gates, function="pick_backend", line=14)  # ENABLE_FOO is not followed: unknown, not False
    assert flag.arches == ["sm120"] and flag.verdicts["sm120"] == "conditional"
    wgmma = one(inv.gates, function="pick_backend", line=17)
    assert wgmma.verdicts == {"sm90": "always", "sm100": "always", "sm103": "never", "sm120": "never", "sm121": "never"}
    jit = one(inv.gates, kind="keyword")
    assert jit.arches == ["sm90", "sm100", "sm103"] and jit.expr == "supported_major_versions=[9, 10]"
    consumer = one(inv.gates, function="Runner.run")
    assert consumer.arches == ["sm120", "sm121"] and consumer.atoms == ["self.sm_major >= 12"]
    # definitions are not gates: their uses are
    assert not [x for x in inv.gates if x.file == "utils.py"]
    assert not [x for x in inv.gates if x.function == "<module>"]


def test_big_functions_are_parsed_by_statement_and_keep_their_locals(tmp_path):
    """A function over FUNC_SPLIT bytes is parsed statement by statement: the statement
    that binds ``major`` from the capability and the one using it are both found."""
    filler = "".join(f"    x{i} = compute({i})\n" for i in range(FUNC_SPLIT // 20))
    feature = ("import torch\n\n\ndef big(args):\n" + filler
               + "    major = torch.cuda.get_device_capability()[0]\n" + filler
               + "    if major == 12:\n        args.consumer = True\n")
    pkg = _tree(tmp_path, feature)
    assert len(feature) > 2 * FUNC_SPLIT
    inv = inventory(pkg, "dir:test", None)
    gate = one(inv.gates, function="big")
    assert gate.arches == ["sm120", "sm121"] and gate.expr == "major == 12"
    assert (pkg / "feature.py").read_text().splitlines()[gate.line - 1].strip() == "if major == 12:"


def test_tests_and_benchmarks_are_not_inventoried(tmp_path):
    pkg = _tree(tmp_path, FEATURE)
    for rel in ("test/test_x.py", "benchmark/bench.py", ".claude/skills/s.py", "srt/test_y.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(FEATURE)
    inv = inventory(pkg, "dir:test", None)
    assert {g.file for g in inv.gates} == {"feature.py"} and inv.stats["files_skipped"] == 4


# -- real releases -------------------------------------------------------------------------
def test_predicates_of_0_5_23_follow_their_definitions(inventories):
    inv = inventories("0.5.23")
    preds = {p.name: p for p in inv.predicates if p.file == "srt/utils/common.py"}
    src = (release("0.5.23") / "srt/utils/common.py").read_text().splitlines()
    expected = {
        "is_blackwell_supported": (["sm100", "sm103", "sm120", "sm121"], "device_capability_majors=[10, 11, 12]"),
        "is_sm100_supported": (["sm100", "sm103"], "device_capability_majors=[10]"),
        "is_sm120_supported": (["sm120", "sm121"], "device_capability_majors=[12]"),
        "is_sm90_supported": (["sm90"], "device_capability_majors=[9]"),
        "is_sm120": (["sm120"], "== (12, 0)"),
        "is_sm121": (["sm121"], "== (12, 1)"),
    }
    for name, (arches, text) in expected.items():
        p = preds[name]
        assert p.arches == arches, name
        assert text in " ".join(" ".join(src[p.line - 1: p.line + 6]).split()), name


def test_fusion_gates_of_0_5_23(inventories):
    """docs/architecture.md (Facts): the runtime gate, the auto-enable and the backend check."""
    inv = inventories("0.5.23")
    runtime = one(inv.gates, file="srt/layers/layer_boundary/residual/add_norm.py", function="flashinfer_ar_fusion_applies")
    assert runtime.arches == ["sm90", "sm100", "sm103"] and runtime.kind == "return"
    assert "(_is_sm90_supported or _is_sm100_supported)" in source_lines("0.5.23", runtime)
    auto = [g for g in inv.gates if g.function == "_flashinfer_allreduce_fusion_auto_enable"
            and "flashinfer_allreduce_fusion_backend" in g.markers]
    assert [g.arches for g in auto] == [["sm90", "sm100", "sm103"]]
    assert "get_platform().is_sm90 or get_platform().is_sm100" in source_lines("0.5.23", auto[0])
    backend = one(inv.gates, file="srt/layers/flashinfer_comm_fusion.py", function="_resolve_backend",
                  expr="not (get_platform().is_sm90 or get_platform().is_sm100)")
    assert backend.verdicts == {"sm90": "never", "sm100": "never", "sm103": "never", "sm120": "always", "sm121": "always"}
    assert "raise" in source_lines("0.5.23", backend)  # the gate that refuses sm120


def test_0_5_10_to_0_5_15_reports_the_moves_as_moved(inventories):
    old, new = inventories("0.5.10"), inventories("0.5.15")
    d = diff(old, new)
    moved = {(c.old.file, c.old.function, c.new.file, c.new.function): c for c in d.changes if c.status == "moved"}
    # the auto-enable left ServerArgs for arg_groups/overrides.py (docs/architecture.md, Facts)
    auto = moved[("srt/server_args.py", "ServerArgs._handle_model_specific_adjustments",
                  "srt/arg_groups/overrides.py", "_flashinfer_allreduce_fusion_auto_enable")]
    assert auto.old.arches == auto.new.arches == ["sm90", "sm100", "sm103"]
    assert "is_sm90_supported() or is_sm100_supported()" in source_lines("0.5.10", auto.old)
    assert "is_sm90_supported() or is_sm100_supported()" in source_lines("0.5.15", auto.new)
    # a rename: the NSA backend became the DSA backend
    assert ("srt/layers/attention/nsa_backend.py", "NativeSparseAttnBackend._forward_standard_mha",
            "srt/layers/attention/dsa_backend.py", "DeepseekSparseAttnBackend._forward_standard_mha") in moved
    # DeepGEMM's Blackwell switch stopped accepting sm120: a predicate and the gates using it
    pred = {p.name: p for p in d.predicates}["DEEPGEMM_BLACKWELL"]
    assert pred.old.arches == ["sm100", "sm103", "sm120", "sm121"] and pred.new.arches == ["sm100", "sm103"]
    cfg = "srt/layers/deep_gemm_wrapper/configurer.py"
    assert "is_blackwell_supported()" in (release("0.5.10") / cfg).read_text().splitlines()[pred.old.line - 1]
    assert "is_sm100_supported()" in (release("0.5.15") / cfg).read_text().splitlines()[pred.new.line - 1]
    changed = [c for c in d.changes if c.status == "changed" and "DEEPGEMM_BLACKWELL" in c.new.expr]
    assert changed and all(c.lost() == ["sm120", "sm121"] for c in changed)
    _no_move_reported_as_remove_and_add(d)


def test_0_5_21_to_0_5_22_reports_the_rename_as_moved(inventories):
    old, new = inventories("0.5.21"), inventories("0.5.22")
    d = diff(old, new)
    renamed = [c for c in d.changes if c.status == "moved" and c.old.function == "apply_flashinfer_allreduce_fusion"]
    assert len(renamed) == 1 and renamed[0].new.function == "flashinfer_ar_fusion_applies"
    assert renamed[0].new.file == renamed[0].old.file == "srt/layers/layer_boundary/residual/add_norm.py"
    assert renamed[0].new.arches == ["sm90", "sm100", "sm103"]
    assert "def flashinfer_ar_fusion_applies" in (release("0.5.22") / renamed[0].new.file).read_text()
    inkling = [c for c in d.changes if c.status == "changed" and c.new.function == "_inkling_overrides"]
    assert len(inkling) == 1 and inkling[0].gained() == ["sm90"] and inkling[0].lost() == []
    assert "fa4\" if get_platform().is_sm100 else" in source_lines("0.5.21", inkling[0].old)
    assert "get_platform().is_sm90 or get_platform().is_sm100" in source_lines("0.5.22", inkling[0].new)
    lora = [c for c in d.changes if c.status == "moved" and c.old.file == "kernels/ops/moe/fused_moe_lora_kernel.py"]
    assert lora and all(c.new.file == "kernels/ops/lora/moe/fused_moe_lora_kernel.py" for c in lora)
    _no_move_reported_as_remove_and_add(d)


def _no_move_reported_as_remove_and_add(d) -> None:
    removed = [c.old for c in d.changes if c.status == "removed"]
    added = [c.new for c in d.changes if c.status == "added"]
    for r in removed:
        for a in added:
            same = normalise(r.expr) == normalise(a.expr) and r.markers == a.markers and r.markers
            assert not same, (r.where, a.where)


def test_is_blackwell_widening_shows_between_0_5_3_and_0_5_6(inventories):
    """SGLang #15650's cause: is_blackwell went from major 10 to majors 10 and 12."""
    d = diff(inventories("0.5.3"), inventories("0.5.6"))
    pred = {p.name: p for p in d.predicates if p.new.file == "srt/utils/common.py"}["is_blackwell"]
    assert pred.old.arches == ["sm100", "sm103"] and pred.new.arches == ["sm100", "sm103", "sm120", "sm121"]
    assert "== 10" in source_lines("0.5.3", pred.old) and "in [10, 12]" in source_lines("0.5.6", pred.new)
    assert pred.guards and all("is_blackwell" in " ".join(g.atoms) for g in pred.guards)


# -- the command ---------------------------------------------------------------------------
def test_cli_diff_inventory_and_errors(tmp_path):
    run = forgepatch("gates", "--source", "pypi:0.5.21", "--against", "pypi:0.5.22", "--json")
    assert run.rc == 1, run.err  # arch sets changed
    doc = run.json()
    assert doc["counts"]["changed"] >= 1 and doc["counts"]["moved"] >= 1
    only = forgepatch("gates", "--source", "pypi:0.5.21", "--against", "pypi:0.5.22", "--arch", "sm90", "--markdown")
    assert only.rc == 1 and "_inkling_overrides" in only.out and "+sm90" in only.out
    assert "apply_flashinfer_allreduce_fusion" not in only.out  # moved, same arches: not a change for sm90
    none = forgepatch("gates", "--source", "pypi:0.5.21", "--against", "pypi:0.5.22", "--arch", "sm121", "--json")
    assert none.rc == 0 and none.json()["counts"]["changed"] == 0

    pkg = _tree(tmp_path, FEATURE)
    inv = forgepatch("gates", "--source", str(pkg.parent), "--arch", "sm90", "--json")
    assert inv.rc == 2 and "holds no SGLang package" in inv.err  # not an sglang/ tree
    sglang = tmp_path / "x" / "sglang"
    sglang.parent.mkdir()
    pkg.rename(sglang)
    ok = forgepatch("gates", "--source", str(sglang.parent), "--arch", "sm90", "--json")
    assert ok.rc == 0, ok.err
    gates = ok.json()["gates"]
    assert gates and all(g["verdicts"]["sm90"] == "never" for g in gates)
    for args, needle in [(["--source", "pypi:0.5.21", "--arch", "sm999"], "--arch: unknown arch"),
                         (["--source", "pypi:0.5.21", "--json", "--markdown"], "exclusive"),
                         (["--source", str(tmp_path / "nowhere")], "is not a directory")]:
        assert_one_line_error(forgepatch("gates", *args), 2, needle)


def test_drift_flags_a_gate_change_of_the_patched_feature(nightlies_repo):
    """v0.5.3 -> v0.5.6: the patch applies at both, but is_blackwell (which guards gates of
    the patched feature) now accepts sm120."""
    run = forgepatch("drift", "--arch", "sm120", "--repo", nightlies_repo, "--revs", "v0.5.3,v0.5.6", "--gates",
                     "--json", "--no-cache")
    assert run.rc == 1, run.err
    doc = run.json()
    assert all(p["status"] != "drift" for r in doc["revs"] for p in r["patches"])
    steps = doc["gates"]
    assert [(s["from"], s["to"]) for s in steps] == [("v0.5.3", "v0.5.6")]
    pred = {p["name"]: p for p in steps[0]["predicates"]}["is_blackwell"]
    assert pred["old_arches"] == ["sm100", "sm103"] and pred["new_arches"] == ["sm100", "sm103", "sm120", "sm121"]
    assert "arch gates of the patched features changed: v0.5.3 -> v0.5.6" in run.err
    plain = forgepatch("drift", "--arch", "sm120", "--repo", nightlies_repo, "--revs", "v0.5.3,v0.5.6", "--json", "--no-cache")
    assert plain.rc == 0 and "gates" not in plain.json()
