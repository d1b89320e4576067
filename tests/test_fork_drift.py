"""`forgepatch drift` over a real git repo of SGLang releases, read from git objects:
statuses agree with `forgepatch apply` on the same releases; drift, absorption and the
blob memo are observed, not assumed."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from support.forkcli import run_inprocess, write_matrix
from support.nightlies import NIGHTLY_RELEASES, PACKAGE_DIR, commit_on, show, without_function

TAGS = [f"v{v}" for v in NIGHTLY_RELEASES]


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    """A private forgepatch cache (drift memo starts empty) sharing the real wheel cache."""
    from forgepatch.paths import cache_dir

    wheels = cache_dir("wheels")
    root = tmp_path / "cache"
    root.mkdir()
    (root / "wheels").symlink_to(wheels, target_is_directory=True)
    monkeypatch.setenv("FORGEPATCH_CACHE_DIR", str(root))
    return root


@pytest.fixture
def config(tmp_path):
    return write_matrix(tmp_path)


def drift(capsys, config, repo, *args):
    rc, out, err = run_inprocess(capsys, "--config", config, "drift", "--arch", "sm120", "--repo", repo, *args)
    return rc, out, err


def sites_of(patch_doc):
    return [(s["site"], s["status"], s["file"], s["line"], s["symbol"]) for s in patch_doc["sites"]]


def test_drift_matches_apply_on_every_release(nightlies_repo, config, cache_root, capsys):
    rc, out, err = drift(capsys, config, nightlies_repo, "--revs", ",".join(TAGS), "--json")
    assert rc == 0, err
    report = json.loads(out)
    assert [r["label"] for r in report["revs"]] == TAGS
    assert [r["version"] for r in report["revs"]] == NIGHTLY_RELEASES
    for rev, version in zip(report["revs"], NIGHTLY_RELEASES):
        # the core's apply on the PyPI release of the same version, no git involved
        rc, out, err = run_inprocess(capsys, "--config", config, "apply", "--arch", "sm120", "--source", f"pypi:{version}", "--check", "--json")
        assert rc in (0, 1), err
        applied = json.loads(out)
        assert [p["patch"] for p in rev["patches"]] == [p["patch"] for p in applied["patches"]]
        for mine, theirs in zip(rev["patches"], applied["patches"]):
            assert mine["status"] == theirs["status"], (version, mine, theirs)
            # the scan carries the per-arch evaluation of the run with texts: every site and
            # finding apply reports, the evaluation's included (the declared `ignored` gates)
            assert sorted(sites_of(mine), key=repr) == sorted(sites_of(theirs), key=repr), version
    assert report["drift"] is False
    assert report["health"][0]["first_drift"] is None and report["health"][0]["retire"] is False


def test_drift_detects_a_deleted_gated_function(nightly_clone, config, cache_root, capsys):
    repo = nightly_clone
    comm = f"{PACKAGE_DIR}/srt/layers/communicator.py"
    drifted = commit_on(repo, "v0.5.20", {comm: without_function(show(repo, "v0.5.20", comm), "apply_flashinfer_allreduce_fusion")},
                        "refactor: drop apply_flashinfer_allreduce_fusion")
    rc, out, err = drift(capsys, config, repo, "--revs", f"v0.5.15,v0.5.20,{drifted}", "--json")
    assert rc == 1
    assert len(err.strip().splitlines()) == 1 and "drift at 1 of 3" in err
    report = json.loads(out)
    assert report["drift"] is True
    statuses = [r["patches"][0]["status"] for r in report["revs"]]
    assert statuses == ["applied", "applied", "drift"]
    site = {s["site"]: s for s in report["revs"][2]["patches"][0]["sites"]}["runtime-fusion-gate"]
    assert site["status"] == "drift" and site["candidates"]
    assert all(s["status"] == "applied" for s in report["revs"][2]["patches"][0]["sites"] if s["site"] != "runtime-fusion-gate")
    assert report["health"][0]["first_drift"] == drifted[:12]
    rc, md, _ = drift(capsys, config, repo, "--revs", f"v0.5.20,{drifted}", "--markdown")
    assert rc == 1
    assert f"| `{drifted[:12]}` | 0.5.21.dev1 | **DRIFT** |" in md and "runtime-fusion-gate" in md and "fix the patch" in md
    rc, table, _ = drift(capsys, config, repo, "--revs", f"v0.5.20,{drifted}")
    assert rc == 1 and "DRIFT" in table and "health over time" in table


def test_drift_evaluates_a_new_modules_gate_that_only_the_evaluation_sees(nightly_clone, config, cache_root, capsys):
    """Upstream adds a module with a gate of the feature (an early return for non-sm90/sm100)
    that no site names: the status scan alone says "applies" (its coverage check reads the
    sites' files); drift judges what apply judges, so the rev is incomplete, exit 1."""
    from forgepatch.arch import get_arch
    from forgepatch.paths import SHIPPED_PATCHES
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.patchset import load_patches

    repo = nightly_clone
    new = f"{PACKAGE_DIR}/srt/layers/flashinfer_workspace.py"
    gate = ("from sglang.srt.utils import is_sm90_supported, is_sm100_supported\n\n"
            "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048\n\n\n"
            "def flashinfer_allreduce_workspace_size(hidden: int) -> int:\n"
            "    if not (is_sm90_supported() or is_sm100_supported()):\n        return 0\n"
            "    return hidden * FUSE_ALLREDUCE_MAX_BATCH_SIZE\n").encode()
    added = commit_on(repo, "v0.5.23", {new: gate}, "feat: a workspace-size helper for the fusion")
    # the scan alone (the engine without texts) calls it fine: the case drift used to pass
    from forgepatch.infra.gitrepo import GitRepo

    with GitRepo(repo) as g:
        tree = g.tree(added, PACKAGE_DIR)
        scan = run_patches(tree, load_patches(SHIPPED_PATCHES, ["sm120-flashinfer-allreduce-fusion"]),
                           get_arch("sm120"), tree.version(), cache={})
    assert [p.status.value for p in scan.patches] == ["applied"]
    rc, out, err = drift(capsys, config, repo, "--revs", f"v0.5.23,{added}", "--json")
    assert rc == 1, out
    report = json.loads(out)
    assert [r["patches"][0]["status"] for r in report["revs"]] == ["applied", "incomplete"]
    found = [s for s in report["revs"][1]["patches"][0]["sites"] if s["site"] == "self-check"]
    assert found and found[0]["status"] == "incomplete" and found[0]["file"] == "srt/layers/flashinfer_workspace.py"
    assert "flashinfer_allreduce_workspace_size" in found[0]["symbol"]


def test_absorbed_upstream_names_the_rev_to_retire_the_patch(nightly_clone, config, cache_root, capsys, tmp_path):
    from forgepatch.paths import SHIPPED_PATCHES

    repo = nightly_clone
    rc, out, err = run_inprocess(capsys, "--config", config, "--patches", SHIPPED_PATCHES, "fork", "--arch", "sm120", "--repo", repo, "--rev", "v0.5.20", "--json")
    assert rc == 0, err
    # upstream merges the change itself: a plain upstream commit with the patched tree
    patched_tree = git(repo, "rev-parse", f"{json.loads(out)['head']}^{{tree}}")
    merged = git(repo, "commit-tree", patched_tree, "-p", "v0.5.20", "-m", "Support SM120 all-reduce fusion")
    rc, out, err = drift(capsys, config, repo, "--revs", f"v0.5.15,v0.5.20,{merged}", "--json")
    assert rc == 0, err
    report = json.loads(out)
    assert [r["patches"][0]["status"] for r in report["revs"]] == ["applied", "applied", "absorbed-upstream"]
    health = report["health"][0]
    assert health["first_absorbed"] == merged[:12] and health["retire"] is True and health["first_drift"] is None
    rc, md, _ = drift(capsys, config, repo, "--revs", f"v0.5.20,{merged}", "--markdown")
    assert "retire this patch" in md


def test_blob_memo_parses_each_distinct_blob_once(nightlies_repo, config, cache_root):
    from forgepatch.fork.blobcache import BlobCache
    from forgepatch.config import load_matrix
    from forgepatch.fork.drift import scan
    from forgepatch.infra.gitrepo import GitRepo
    from forgepatch.paths import SHIPPED_PATCHES

    matrix = load_matrix(config)
    revs = TAGS[3:]  # one applies_to regime: every site is live at all of them
    with GitRepo(nightlies_repo) as repo:
        trees = [repo.tree(repo.resolve(t)) for t in revs]
        distinct = {t.key(p) for t in trees for p in t.paths()}
        assert len(distinct) < 0.8 * sum(len(t.paths()) for t in trees)  # blobs are shared
    with BlobCache() as cache:
        cold = scan(nightlies_repo, "sm120", matrix, SHIPPED_PATCHES, revs, cache=cache)
        assert cold.stats["engine_runs"] == len(revs)
        # one scan per distinct blob, not per (rev, file); plus one tree-memo miss per rev
        assert cache.misses == len(distinct) + len(revs)
    with BlobCache() as cache:  # warm, per-file memo only
        blob_warm = scan(nightlies_repo, "sm120", matrix, SHIPPED_PATCHES, revs, cache=cache, tree_memo=False)
        assert cache.misses == 0 and blob_warm.stats["engine_runs"] == len(revs)
    with BlobCache() as cache:  # warm, per-tree memo: the engine is not even loaded
        tree_warm = scan(nightlies_repo, "sm120", matrix, SHIPPED_PATCHES, revs, cache=cache)
        assert tree_warm.stats["tree_memo_hits"] == len(revs) and tree_warm.stats["engine_runs"] == 0
    nocache = scan(nightlies_repo, "sm120", matrix, SHIPPED_PATCHES, revs, cache=None)
    for report in (blob_warm, tree_warm, cold):
        assert report.to_json()["revs"] == nocache.to_json()["revs"]
    # the cache is safe to delete
    for f in (cache_root / "drift").iterdir():
        f.unlink()
    with BlobCache() as cache:
        again = scan(nightlies_repo, "sm120", matrix, SHIPPED_PATCHES, revs, cache=cache)
        assert again.stats["engine_runs"] == len(revs) and again.to_json()["revs"] == nocache.to_json()["revs"]


def test_since_every_walks_first_parent_history(nightlies_repo, config, cache_root, capsys):
    rc, out, err = drift(capsys, config, nightlies_repo, "--since", "v0.5.3", "--every", "2", "--json")
    assert rc == 0, err
    assert [r["label"] for r in json.loads(out)["revs"]] == ["v0.5.3", "v0.5.10", "v0.5.20", "v0.5.23"]
    rc, out, err = drift(capsys, config, nightlies_repo, "--since", "v0.5.10", "--until", "v0.5.20", "--json")
    assert [r["label"] for r in json.loads(out)["revs"]] == ["v0.5.10", "v0.5.15", "v0.5.20"]


def _bad(capsys, config, repo, *args):
    rc, out, err = drift(capsys, config, repo, *args)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_drift_bad_input(nightlies_repo, config, tmp_path, capsys, cache_root):
    assert "unknown revision" in _bad(capsys, config, nightlies_repo, "--revs", "v0.5.20,nope")
    plain = tmp_path / "plain"
    plain.mkdir()
    assert "not a git repository" in _bad(capsys, config, plain, "--revs", "HEAD")
    assert "not both" in _bad(capsys, config, nightlies_repo, "--revs", "v0.5.20", "--since", "v0.5.3")
    assert "--every" in _bad(capsys, config, nightlies_repo, "--since", "v0.5.3", "--every", "0")
    assert "--revs" in _bad(capsys, config, nightlies_repo)
    empty = tmp_path / "empty"
    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    (empty / "README.md").write_text("not sglang\n")
    subprocess.run(["git", "-C", str(empty), "add", "README.md"], check=True)
    subprocess.run(["git", "-C", str(empty), "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "x"], check=True)
    assert "no SGLang package" in _bad(capsys, config, empty, "--revs", "HEAD")


def test_memo_respects_applies_to_boundaries(nightly_clone, config, cache_root, tmp_path):
    """The same blobs seen first at a version where a site does not apply yet (a
    pre-release nightly) and then at a release where it does: no stale memo."""
    from forgepatch.fork.blobcache import BlobCache
    from forgepatch.config import load_matrix
    from forgepatch.fork.drift import scan
    from forgepatch.paths import SHIPPED_PATCHES

    repo = nightly_clone
    nightly = git(repo, "commit-tree", "v0.5.15^{tree}", "-p", "v0.5.10", "-m", "nightly before 0.5.14")
    matrix = load_matrix(config)
    # the shipped patch finds its sites by presence; give one site a version bound
    patches = tmp_path / "patches"
    shutil.copytree(SHIPPED_PATCHES, patches)
    toml = patches / "sm120-flashinfer-allreduce-fusion.toml"
    toml.write_text(toml.read_text().replace(
        'markers = ["FlashInfer allreduce fusion"]\n',
        'markers = ["FlashInfer allreduce fusion"]\napplies_to = ">=0.5.14"\n', 1))
    with BlobCache() as cache:
        report = scan(repo, "sm120", matrix, patches, [nightly, "v0.5.15"], cache=cache)
    fresh = scan(repo, "sm120", matrix, patches, ["v0.5.15"], cache=None)
    backend = lambda rev: {s["site"]: s["status"] for s in rev["patches"][0]["sites"]}["backend-check"]  # noqa: E731
    doc = report.to_json()
    assert doc["revs"][0]["version"] == "0.5.11.dev1" and backend(doc["revs"][0]) == "not-applicable"
    assert doc["revs"][1] == fresh.to_json()["revs"][0] and backend(doc["revs"][1]) == "applied"


def test_drift_summary_counts_every_failing_revision_and_names_the_renamed_function(nightly_clone, config, cache_root,
                                                                                     capsys):
    """A revision whose only failure is `review` (the edit set differs from the lock) is
    counted (the summary read "drift at 0 of 2 revision(s): "); a renamed site function is
    named first, with the edit to make."""
    repo = nightly_clone
    add_norm = f"{PACKAGE_DIR}/srt/layers/layer_boundary/residual/add_norm.py"
    src = show(repo, "v0.5.23", add_norm)
    swapped = src.replace(b"(_is_sm90_supported or _is_sm100_supported)", b"(_is_sm100_supported or _is_sm90_supported)")
    assert swapped != src
    review = commit_on(repo, "v0.5.23", {add_norm: swapped}, "refactor: operand order")
    renamed_files = {}
    for path in git(repo, "grep", "-l", "flashinfer_ar_fusion_applies", "v0.5.23", "--", PACKAGE_DIR).splitlines():
        path = path.split(":", 1)[1]
        renamed_files[path] = show(repo, "v0.5.23", path).replace(b"flashinfer_ar_fusion_applies",
                                                                  b"should_fuse_allreduce_residual")
    renamed = commit_on(repo, "v0.5.23", renamed_files, "refactor: rename the fusion gate")
    rc, out, err = drift(capsys, config, repo, "--revs", f"v0.5.23,{review}")
    assert rc == 1
    assert err.strip().splitlines()[-1].endswith(f"review at 1 of 2 revision(s): {review[:12]} (review)"), err
    rc, out, err = drift(capsys, config, repo, "--revs", f"v0.5.23,{renamed}")
    assert rc == 1 and err.strip().endswith(f"drift at 1 of 2 revision(s): {renamed[:12]} (drift)"), err
    line = next(ln for ln in out.splitlines() if "runtime-fusion-gate" in ln)
    assert "it looks renamed to should_fuse_allreduce_residual" in line and "set functions = [" in line, out
    cands = line.split("candidates: ", 1)[1]
    assert cands.startswith("sglang.srt.layers.layer_boundary.residual.add_norm.should_fuse_allreduce_residual"), line
