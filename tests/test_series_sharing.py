"""A series of patches shares its work over the tree (issue 22 item 6), on the real 0.5.23
wheel with the shipped sm120 patch and copies of it under new ids (every copy runs: it finds
its gates already widened): the byte prefilters of every patch are answered from one index
of the tree (each file is tested only where a needle of the patch is), and the answers are
those of the patch run alone."""

from __future__ import annotations

from collections import Counter

from forgepatch.arch import get_arch
from forgepatch.patching import engine, evaluation, lint
from forgepatch.patching.patchset import load_patch
from forgepatch.patching.trees import DirTree
from forgepatch.paths import SHIPPED_PATCHES

FUSION = SHIPPED_PATCHES / "sm120-flashinfer-allreduce-fusion.toml"


def _copies(tmp_path, n: int):
    text = FUSION.read_text()
    out = [load_patch(FUSION)]
    for k in range(1, n):
        path = tmp_path / f"fusion-copy{k}.toml"
        path.write_text(text.replace('id = "sm120-flashinfer-allreduce-fusion"', f'id = "fusion-copy{k}"', 1))
        out.append(load_patch(path))
    return out


def _site_view(res):
    return [[(s.site, s.status.value, s.file, s.line, s.detail, [(loc.status.value, loc.file, loc.line)
                                                                  for loc in s.locations]) for s in p.sites]
            for p in res.patches]


def test_a_series_tests_each_file_by_its_index_not_once_per_patch(tmp_path, monkeypatch):
    from forgepatch.sources import pypi_tree

    package = pypi_tree("0.5.23").package
    calls: Counter = Counter()
    for module, name in ((evaluation, "feature_file"), (lint, "candidate")):
        real = getattr(module, name)

        def counted(*args, _real=real, _name=name):
            calls[_name] += 1
            return _real(*args)

        monkeypatch.setattr(module, name, counted)
    arch = get_arch("sm120")
    alone = engine.run_patches(DirTree(package, True), _copies(tmp_path, 1), arch, "0.5.23")
    paths = len(DirTree(package, True).paths())
    assert calls["feature_file"] == paths  # one patch alone: every file, as before
    calls.clear()
    series = engine.run_patches(DirTree(package, True), _copies(tmp_path, 3), arch, "0.5.23")
    # three patches: only the files holding one of their markers (before: every file, per patch)
    assert 0 < calls["feature_file"] < paths / 10, calls
    assert 0 < calls["candidate"] < paths / 10, calls
    assert series.verified and not series.drift
    first, *copies = series.patches
    assert first.status.value == "applied" and _site_view(series)[0] == _site_view(alone)[0]
    assert first.changes == alone.patches[0].changes
    for copy in copies:  # each copy finds the gates the first one widened, in the same files
        assert copy.status.value == "already-applied", copy.to_json()
        assert not copy.changes
        assert [(s.site, s.file) for s in copy.sites] == [(s.site, s.file) for s in first.sites]
    assert _site_view(series)[1] == _site_view(series)[2]  # and the same answers


# -- the index's answers are the plain searches' (property) -----------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

_WORDS = st.sampled_from([b"is_sm", b"allreduce", b"_fusion", b"enable_", b"def ", b"(", b"flashinfer",
                          b"FlashInfer allreduce", b"x", b" ", b"\n", b"\xe9", b"backend"])
_TEXT = st.lists(_WORDS, max_size=12).map(b"".join)


@settings(max_examples=60, deadline=None)
@given(files=st.lists(_TEXT, min_size=1, max_size=6),
       needles=st.lists(st.one_of(_TEXT.filter(bool), _WORDS), min_size=1, max_size=6),
       names=st.lists(st.sampled_from(["enable_", "f", "allreduce", "enable_fusion", "x"]), min_size=1, max_size=3))
def test_the_series_index_answers_as_a_plain_search(files, needles, names):
    """``holding`` (needles grouped by a shared part, each part searched once) and ``defining``
    (per file the names of its ``def NAME(``) give the files a plain search over every file
    gives, in any order of asking."""
    import re
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        for i, data in enumerate(files):
            (Path(d) / f"m{i}.py").write_bytes(data)
        overlay = engine._Overlay(DirTree(Path(d)))
        overlay.keep_bytes = True
        half = len(needles) // 2
        for batch in (needles[:half], needles[half:], needles):  # asked in parts, then again whole
            if batch:
                want = {f"m{i}.py" for i, data in enumerate(files) if any(n in data for n in batch)}
                assert overlay.holding(*batch) == want
        want = {f"m{i}.py" for i, data in enumerate(files)
                if any(re.search(rb"def " + n.encode() + rb"\(", data) for n in names)}
        assert overlay.defining(names) == want


def test_needles_sharing_a_part_are_grouped():
    shared, alone = engine._shared_parts([b"enable_flashinfer_allreduce_fusion", b"forward_with_allreduce_fusion",
                                          b"FUSE_ALLREDUCE", b"is_sm", b"flashinfer_allreduce_fusion_backend"])
    assert len(shared) == 1 and sorted(alone) == [b"FUSE_ALLREDUCE", b"is_sm"]
    (part, members), = shared.items()
    assert len(part) == engine.PART and all(part in m for m in members) and len(members) == 3


# -- a file no patch changes is never parsed whole ---------------------------------------------

def _result_view(res):
    return [(p.patch_id, p.status.value, p.changes, [(c.file, c.line, c.function, c.status, c.before, c.after)
                                                     for c in p.checks]) for p in res.patches] + [_site_view(res)]


def test_a_patch_that_changes_nothing_leaves_its_file_unparsed(tmp_path, monkeypatch):
    """The example series (every kind, every arch it names) over releases where its patches
    apply, are absorbed upstream or find nothing: site functions are read one by one first,
    and a file is parsed whole only where a patch changes it. The results (statuses, lines,
    texts, every judged gate) are those of the engine that parses every site file whole."""
    from pathlib import Path

    from forgepatch.sources import pypi_tree

    examples = sorted((Path(__file__).resolve().parents[1] / "docs" / "examples" / "patches").glob("*.toml"))
    patches = [load_patch(FUSION)] + [load_patch(p) for p in examples]
    parsed: list[str] = []
    real_module = engine._Overlay.module

    def module(self, rel, text):
        parsed.append(rel)
        return real_module(self, rel, text)

    monkeypatch.setattr(engine._Overlay, "module", module)
    spared = set()
    for version, arch in (("0.5.23", "sm120"), ("0.5.15", "sm120"), ("0.5.23", "sm103"), ("0.5.10", "sm121")):
        package = pypi_tree(version).package
        parsed.clear()
        fast = engine.run_patches(DirTree(package, True), patches, get_arch(arch), version)
        changed = {rel for p in fast.patches for rel in p.changes}
        assert set(parsed) <= changed, (version, arch, set(parsed) - changed)
        spared |= {(version, loc.file) for p in fast.patches for site in p.sites for loc in site.locations
                   if loc.file and loc.file not in changed}  # a site read, its file never parsed
        with monkeypatch.context() as whole:
            whole.setattr(engine, "_declarative", lambda patch: False)
            slow = engine.run_patches(DirTree(package, True), patches, get_arch(arch), version)
        assert _result_view(fast) == _result_view(slow), (version, arch)
        assert fast.verified == slow.verified
    assert ("0.5.23", "srt/arg_groups/attention_hook.py") in spared, spared  # trtllm-mha-prefill: absorbed upstream
