"""The acceptance corpus: every SGLang release on PyPI that has the FlashInfer all-reduce
fusion gate in its sm90/sm100 form, from the first (0.5.2; 0.5.1.post3 and earlier fuse on
sm100 only) through 0.5.23, `.post` releases included (read off `pip index versions sglang`
on 2026-12-01). Sources come from the cached wheels (``forgepatch.sources.pypi_tree``:
downloaded and extracted once, then reused).
"""

from __future__ import annotations

from packaging.version import Version

CORPUS = [
    "0.5.2",
    "0.5.3", "0.5.3.post1", "0.5.3.post2", "0.5.3.post3",
    "0.5.4", "0.5.4.post1", "0.5.4.post2", "0.5.4.post3",
    "0.5.5", "0.5.5.post1", "0.5.5.post2", "0.5.5.post3",
    "0.5.6", "0.5.6.post1", "0.5.6.post2",
    "0.5.7",
    "0.5.8", "0.5.8.post1",
    "0.5.9",
    "0.5.10", "0.5.10.post1",
    "0.5.11",
    "0.5.12", "0.5.12.post1",
    "0.5.13", "0.5.13.post1",
    "0.5.14",
    "0.5.15", "0.5.15.post1",
    "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
]
# The last releases before the corpus: the fusion gate is `_is_sm100_supported` alone.
BEFORE = ["0.5.1.post3", "0.4.10"]


def expected_sm120_gates(version: str) -> set[tuple[str, str]]:
    """(file, function) of each gate the sm120 patch must widen, read off the release
    wheels (docs/architecture.md, Facts), not off the tool's output."""
    v = Version(version)
    if v < Version("0.5.8"):
        runtime = ("srt/layers/communicator.py", "_gather_hidden_states_and_residual")
    elif v < Version("0.5.21"):
        runtime = ("srt/layers/communicator.py", "apply_flashinfer_allreduce_fusion")
    elif v < Version("0.5.22"):
        runtime = ("srt/layers/layer_boundary/residual/add_norm.py", "apply_flashinfer_allreduce_fusion")
    else:
        runtime = ("srt/layers/layer_boundary/residual/add_norm.py", "flashinfer_ar_fusion_applies")
    gates = {runtime}
    # 0.5.2-0.5.5: the auto-enable is sm100-only; 0.5.6/0.5.7: `is_sm90_supported() or
    # is_blackwell_supported()` (majors 10 and 12) already accepts sm120
    if Version("0.5.8") <= v < Version("0.5.15"):
        gates.add(("srt/server_args.py", "_handle_model_specific_adjustments"))
    elif v >= Version("0.5.15"):
        gates.add(("srt/arg_groups/overrides.py", "_flashinfer_allreduce_fusion_auto_enable"))
    if v >= Version("0.5.14"):
        gates.add(("srt/layers/flashinfer_comm_fusion.py", "_resolve_backend"))
    return gates


def expected_sm103_file(version: str) -> str:
    """Where the checking ``check_server_args`` lives (the language server's, ``srt/``)."""
    return "srt/arg_groups/validation_hook.py" if Version(version) >= Version("0.5.19") else "srt/server_args.py"
