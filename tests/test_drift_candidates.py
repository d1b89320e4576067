"""A drifted site's candidates ranked by meaning, and the edit to make (issue 26).

Real parts: the SGLang 0.5.23 wheel's tree (cached) with the runtime fusion gate's function
renamed (and moved out of the site's modules), the shipped sm120 patch, the real CLI; a
hypothesis property over generated modules: a renamed copy of the site function ranks first
among decoys (names closer to the site's, functions holding fewer markers, functions that do
not read the arch)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES
from forgepatch.patching.patchset import Site
from forgepatch.sources import pypi_tree
from tests.support.cli import forgepatch

OLD, NEW = "flashinfer_ar_fusion_applies", "should_fuse_allreduce_residual"
ADD_NORM = "srt/layers/layer_boundary/residual/add_norm.py"
PATCH = "sm120-flashinfer-allreduce-fusion"


def _project(dest: Path) -> Path:
    dest.mkdir()
    shutil.copy(SHIPPED_MATRIX, dest / "matrix.toml")
    shutil.copytree(SHIPPED_PATCHES, dest / "patches")
    return dest


def _renamed_tree(dest: Path) -> Path:
    """0.5.23 with the site function renamed everywhere it is named (callers, imports)."""
    shutil.copytree(pypi_tree("0.5.23").package, dest / "sglang")
    for f in (dest / "sglang").rglob("*.py"):
        data = f.read_bytes()
        if OLD.encode() in data:
            f.write_bytes(data.replace(OLD.encode(), NEW.encode()))
    return dest


def _site(doc: dict, name: str) -> dict:
    return next(s for p in doc["patches"] if p["patch"] == PATCH for s in p["sites"] if s["site"] == name)


def test_a_renamed_site_function_ranks_first_with_the_edit_to_make(tmp_path):
    project = _project(tmp_path / "proj")
    tree = _renamed_tree(tmp_path / "t")
    run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--check", "--json", cwd=project)
    assert run.rc == 1, run.err
    site = _site(run.json(), "runtime-fusion-gate")
    assert site["status"] == "drift"
    assert site["candidates"][0].startswith(f"sglang.srt.layers.layer_boundary.residual.add_norm.{NEW} ({ADD_NORM}:")
    # the self-check names the same function: the next check's name comes first
    incomplete = [loc for loc in _site(run.json(), "self-check")["locations"] if loc["status"] == "incomplete"]
    assert incomplete and incomplete[0]["symbol"] == NEW
    assert f"it looks renamed to {NEW}" in site["detail"]
    assert "holds the markers flashinfer_allreduce_fusion_backend, FUSE_ALLREDUCE_MAX_BATCH_SIZE" in site["detail"]
    assert f"it looks renamed to {NEW}" in run.err  # the failure line carries it too
    # the edit it names, made: the site is found again
    edit = re.search(r"set functions = (\[[^\]]*\])", site["detail"]).group(1)
    toml = project / "patches" / f"{PATCH}.toml"
    text = toml.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("functions = ") and OLD in ln)
    toml.write_text(text.replace(line, f"functions = {edit}"))
    again = forgepatch("apply", "--arch", "sm120", "--source", tree, "--check", "--json", cwd=project)
    site = _site(again.json(), "runtime-fusion-gate")
    assert site["status"] == "applied", site
    assert not [loc for loc in _site(again.json(), "self-check")["locations"] if loc["status"] == "incomplete"]


def test_a_renamed_and_moved_function_ranks_first_and_the_edit_names_its_module(tmp_path):
    from forgepatch.patching.locate import ranked, rename_hint
    from forgepatch.patching.patchset import load_patch
    from forgepatch.patching.trees import DirTree
    from tests.support.nightlies import without_function

    tree = _renamed_tree(tmp_path / "t") / "sglang"
    src = (tree / ADD_NORM).read_bytes()
    body = re.search(rb"^def " + NEW.encode() + rb"\(.*?(?=^\S)", src, re.M | re.S).group(0)
    (tree / ADD_NORM).write_bytes(without_function(src, NEW))
    moved = "srt/utils/fusion_policy.py"
    (tree / moved).write_bytes(b"from sglang.srt.layers.layer_boundary.residual.add_norm import *\n\n\n" + body)
    site = next(s for s in load_patch(SHIPPED_PATCHES / f"{PATCH}.toml").sites if s.name == "runtime-fusion-gate")
    dt = DirTree(tree)
    best = ranked(dt.paths(), lambda rel: (tree / rel).read_bytes(), site)
    assert (best[0].name, best[0].file, best[0].in_modules) == (NEW, moved, False)
    hint = rename_hint(site, best[0])
    assert f'"{NEW}"]' in hint and f'modules = ["srt/layers/communicator.py", "srt/layers/layer_boundary/**", "{moved}"]' in hint


# -- the property --------------------------------------------------------------------------
MARKERS = ("fusion_backend", "MAX_FUSE_BATCH", "enable_fused_allreduce")
SITE = Site("gate", functions=("fused_allreduce_applies",), modules=("pkg/*.py",), markers=MARKERS)
ident = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=3, max_size=24).filter(lambda s: s.isidentifier())


def _function(name: str, markers: tuple[str, ...], arch: bool, indent: str = "") -> str:
    terms = ["(_is_sm90_supported or _is_sm100_supported)"] if arch else ["_is_flashinfer_available"]
    terms += [f"config.{m} is not None" for m in markers] or ["batch_size > 0"]
    body = f"\n{indent}        and ".join(terms)
    return f"{indent}def {name}(batch_size: int):\n{indent}    return (\n{indent}        {body}\n{indent}    )\n\n\n"


@st.composite
def modules(draw):
    """A renamed copy of the site function (holding ``k`` markers, reading the arch) among
    decoys: each holds fewer markers, or does not read the arch; some have names that are a
    letter away from the site function's."""
    k = draw(st.integers(1, len(MARKERS)))
    held = tuple(draw(st.permutations(MARKERS))[:k])
    renamed = draw(ident.filter(lambda n: n not in SITE.functions))
    decoys = []
    for _ in range(draw(st.integers(1, 6))):
        arch = draw(st.booleans())
        most = k - 1 if arch else len(MARKERS)  # reading the arch, it holds fewer markers
        markers = tuple(draw(st.permutations(MARKERS))[: draw(st.integers(0, most))])
        name = draw(st.one_of(ident, st.sampled_from(["fused_allreduce_applied", "fused_allreduce_apply",
                                                      "fused_allreduce_applies_"])))
        decoys.append((name, markers, arch))
    at = draw(st.integers(0, len(decoys)))
    method = draw(st.booleans())
    return held, renamed, decoys, at, method


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_property_a_renamed_site_function_ranks_first_among_decoys(case):
    from forgepatch.patching.locate import ranked, rename_hint

    held, renamed, decoys, at, method = case
    decoys = [d for d in decoys if d[0] != renamed]
    parts = [_function(*d) for d in decoys]
    indent = "    " if method else ""
    parts.insert(min(at, len(parts)), _function(renamed, held, True, indent=indent))
    text = "".join(("class Gates:\n" + p) if p.startswith("    ") else p for p in parts)
    files = {"pkg/a.py": text.encode()}
    best = ranked(list(files), files.__getitem__, SITE)
    assert best[0].name == renamed, [(c.name, c.key()) for c in best]
    assert set(best[0].markers) == set(held) and best[0].reads_arch
    assert f"it looks renamed to {renamed}" in rename_hint(SITE, best[0])
