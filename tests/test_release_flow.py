"""`forgepatch release` end to end: a real git repo with a fork branch of a real SGLang
release, real images in the Docker engine, smoke results written by the real `forgepatch
smoke` (docker runner). Release succeeds for a passing combination (checked with git, the
docker SDK and the ledger file), refuses each failing / missing / stale / patchset-changed
case with its reason and changes nothing, is idempotent, never moves a tag, and two
concurrent releases make one tag."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from support.release_world import BRANCH, FAIL, TAG, World, cli_env, git, reasons

pytestmark = pytest.mark.docker


def one_line(r, rc):
    assert r.returncode == rc, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def assert_nothing_released(w: World, ledger_before: bytes | None = None, tags_before=()):
    assert w.tags() == list(tags_before)
    assert w.ledger_bytes() == ledger_before
    if ledger_before is None:
        assert not (w.root / "releases").exists()  # no ledger, no archived results, no lock file
        assert w.image_id(w.validated) is None


def test_release_tags_the_validated_combination(world):
    w = world
    image = w.build()
    results = w.smoke()  # ok + gate pass; the optional profile 'extra' fails
    jobs = {j["profile"]: j for j in json.loads(results.read_text())["jobs"]}
    assert {p: (j["status"], j["image_id"], j["patchset"]) for p, j in jobs.items()} == {
        "ok": ("pass", image, w.patchset), "gate": ("pass", image, w.patchset), "extra": ("fail", image, w.patchset)}
    r = w.release(results, "--json")
    assert r.returncode == 0, r.stderr
    comb = json.loads(r.stdout)["combinations"][0]
    assert comb["status"] == "released" and comb["tag"] == TAG

    # git: an annotated tag on the fork branch head, with the results summary and hash
    head = git(w.repo, "rev-parse", f"refs/heads/{BRANCH}")
    assert git(w.repo, "cat-file", "-t", f"refs/tags/{TAG}") == "tag"
    assert git(w.repo, "rev-parse", f"{TAG}^{{commit}}") == head
    message = git(w.repo, "tag", "-l", "--format=%(contents)", TAG)
    results_sha = hashlib.sha256(results.read_bytes()).hexdigest()
    assert f"results file {results.name} sha256:{results_sha}" in message
    assert f"Forgepatch-Image: {image}" in message and f"Forgepatch-Commit: {head}" in message
    assert f"Forgepatch-Patchset: {w.patchset}" in message and "Forgepatch-Profiles: gate,ok" in message
    assert "  ok    pass  job sm120-p23-ok" in message and "  gate  pass  job sm120-p23-gate" in message
    assert "extra" not in message

    # docker: the image got its validated tag
    assert w.image_id(w.validated) == image

    # the ledger: one chained entry, results archived
    doc = json.loads(w.ledger.read_text())
    (entry,) = doc["releases"]
    assert entry["tag"] == TAG and entry["tag_object"] == git(w.repo, "rev-parse", f"refs/tags/{TAG}")
    assert (entry["pin"], entry["arch"], entry["commit"], entry["branch"]) == ("p23", "sm120", head, BRANCH)
    assert entry["image"]["id"] == image and entry["image"]["ref"] == w.content_tag
    assert entry["image"]["validated"] == w.validated and entry["patchset"] == w.patchset
    assert sorted(entry["profiles"]) == ["gate", "ok"] and all(p["status"] == "pass" for p in entry["profiles"].values())
    assert entry["results"][0]["sha256"] == results_sha
    assert (w.ledger.parent / entry["results"][0]["archive"]).read_bytes() == results.read_bytes()
    from forgepatch.release.ledger import Ledger, chain_problem

    assert entry["prev"] == "" and chain_problem(Ledger(w.ledger).read()) is None

    # status: the compatibility table
    md = w.run("status", "--markdown", cwd=w.root)
    assert md.returncode == 0, md.stderr
    assert md.stdout.splitlines()[:3] == ["| pin | sm120 | sm90 |", "|---|---|---|",
                                          f"| p23 | gate, ok (`{TAG}`) | - |"]
    table = w.run("status", cwd=w.root)
    assert table.returncode == 0 and "gate, ok" in table.stdout and TAG in table.stdout


def test_release_is_idempotent_and_tags_never_move(world):
    w = world
    w.build()
    first = w.smoke()
    assert w.release(first).returncode == 0
    tag_object, ledger = git(w.repo, "rev-parse", f"refs/tags/{TAG}"), w.ledger_bytes()

    again = w.release(first, "--json")  # same results
    rerun = w.release(w.smoke(), "--json")  # a fresh smoke run of the same image: same combination
    for r in (again, rerun):
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["combinations"][0]["status"] == "unchanged"
    assert git(w.repo, "rev-parse", f"refs/tags/{TAG}") == tag_object and w.ledger_bytes() == ledger

    # a different combination under the same tag name: refused, nothing moves
    rebuilt = w.rebuild()
    r = w.release(w.smoke(), "--json")
    line = one_line(r, 1)
    assert "already names a different combination" in line and "image" in line and "immutable" in line
    assert list(reasons(r)) == ["tag-taken"]
    assert git(w.repo, "rev-parse", f"refs/tags/{TAG}") == tag_object and w.ledger_bytes() == ledger
    assert w.image_id(w.validated) != rebuilt


def test_refuses_a_failing_profile_with_its_signature(world):
    w = world
    w.write_matrix(gate=FAIL)
    w.build()
    r = w.release(w.smoke(), "--json")
    line = one_line(r, 1)
    assert line.startswith("forgepatch: error: release refused for sm120/p23: profile gate failed:")
    assert "[cublas-gemm-execution-failed]" in line and "CUBLAS_STATUS_EXECUTION_FAILED" in line
    assert list(reasons(r)) == ["failing-profile"]
    assert_nothing_released(w)


def test_refuses_missing_results(world):
    w = world
    w.build()
    r = w.release(w.smoke("--profile", "ok"), "--json")
    line = one_line(r, 1)
    assert "no smoke results for required profile gate" in line
    assert reasons(r) == {"missing-results": [reasons(r)["missing-results"][0]]}
    assert_nothing_released(w)


def test_refuses_stale_results_and_changes_nothing(world):
    w = world
    w.build()
    results = w.smoke()
    assert w.release(results, "--dry-run", "--json").returncode == 0
    assert_nothing_released(w)  # a dry run writes nothing
    rebuilt = w.rebuild()
    r = w.release(results, "--json")
    line = one_line(r, 1)
    assert "stale results for ok" in line and "rebuilt since" in line and rebuilt[:19] in line
    assert sorted(reasons(r)) == ["stale-results"] and len(reasons(r)["stale-results"]) == 2
    assert_nothing_released(w)


def test_refusal_leaves_an_existing_ledger_byte_for_byte(world):
    w = world
    w.build()
    results = w.smoke()
    assert w.release(results).returncode == 0
    ledger, tags = w.ledger_bytes(), w.tags()
    w.rebuild()
    r = w.release(results)
    assert "stale results" in one_line(r, 1)
    assert_nothing_released(w, ledger, tags)


def test_refuses_when_the_patchset_changed_since_the_branch_was_made(world):
    w = world
    patch = w.patches / "sm120-flashinfer-allreduce-fusion.toml"
    patch.write_text(patch.read_text() + "\n# tightened after the fork\n")
    w.build()  # the image and the results are current: only the branch is behind
    r = w.release(w.smoke(), "--json")
    line = one_line(r, 1)
    assert "patchset changed since branch forgepatch/sm120/p23 was made" in line
    assert w.patchset in line
    assert list(reasons(r)) == ["patchset-changed"]
    assert_nothing_released(w)


def test_two_concurrent_releases_make_one_tag(world):
    w = world
    w.build()
    results = w.smoke()
    cmd = [sys.executable, "-m", "forgepatch", "--config", str(w.config), "--patches", str(w.patches), "release",
           "--repo", str(w.repo), "--results", str(results), "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    statuses = sorted(json.loads(o)["combinations"][0]["status"] for o, _ in outs)
    assert statuses == ["released", "unchanged"]
    assert w.tags() == [TAG]
    assert len(json.loads(w.ledger.read_text())["releases"]) == 1


def test_an_interrupted_release_is_rolled_back_or_completed(world, monkeypatch, capsys):
    w = world
    image = w.build()
    results = w.smoke()

    # the ledger write fails after the tag was made: the tag and the image tag are rolled back
    from forgepatch.cli import main
    from forgepatch.release.ledger import Ledger

    def disk_full(self, entry):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Ledger, "append", disk_full)
    # no traceback: the last-resort handler says what failed, in one line (exit 2)
    assert main(["--config", str(w.config), "--patches", str(w.patches), "release", "--repo", str(w.repo),
                 "--results", str(results), "--arch", "sm120", "--pin", "p23"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "No space left on device" in err[0], err
    monkeypatch.undo()
    assert w.tags() == [] and w.image_id(w.validated) is None and not w.ledger.exists()

    # a run that died between the tag and the ledger: the next run records the tag it finds
    assert w.release(results).returncode == 0
    tag_object = git(w.repo, "rev-parse", f"refs/tags/{TAG}")
    w.ledger.unlink()
    r = w.release(results, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["combinations"][0]["status"] == "recorded"
    (entry,) = json.loads(w.ledger.read_text())["releases"]
    assert entry["tag_object"] == tag_object and entry["image"]["id"] == image
    assert w.verify().returncode == 0
