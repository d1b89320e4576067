"""`forgepatch results merge` on real shard outputs: `forgepatch smoke --shard 1/2` and `2/2`
with the local runner (server profiles against the stand-in server, a labelled test double,
and command profiles), merged, give the table of an unsharded run; conflicting duplicates are
refused naming both files; the merged file is what release and the reports read."""

from __future__ import annotations

import json

import pytest

from support.smoke_matrix import profile, run_cli, write_matrix

PROFILES = {
    "ok": profile("ok", ["--tp-size 2"], timeout_s=60),
    "ep8": profile("ep8", ["--tp-size 2", "--ep-size 8"], timeout_s=60,
                   env={"FAKE_SGLANG_FAIL_IF": "--ep-size 8", "FAKE_SGLANG_FAIL": "cublas"}),
    "cmd": profile("cmd", kind="command", command="sh -c 'echo job ran'", timeout_s=30),
    "opt": profile("opt", kind="command", command="sh -c 'exit 3'", timeout_s=30, required=False),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The unsharded run and the two shards, each a real `forgepatch smoke --json` document."""
    tmp = tmp_path_factory.mktemp("merge")
    config = write_matrix(tmp / "matrix.toml", PROFILES, sm103=["ok", "ep8", "cmd"], sm120=["ok", "opt"])
    out = {}
    for name, extra in (("all", ()), ("s1", ("--shard", "1/2")), ("s2", ("--shard", "2/2"))):
        r = run_cli("--config", config, "smoke", "--runner", "local", "--jobs", "2", "--json",
                    "--logs", tmp / "logs", *extra)
        assert r.returncode == 1, r.stderr  # ep8 is required and fails: exit 1, results still written
        path = tmp / f"{name}.json"
        path.write_text(r.stdout)
        out[name] = path
    out["tmp"] = tmp
    return out


def _table(path) -> str:
    from forgepatch.combination.results import SmokeResults
    from forgepatch.smoke.report import to_markdown

    return to_markdown(SmokeResults.parse(path, path.read_bytes()).jobs)


def test_merged_shards_give_the_unsharded_table(runs):
    whole = json.loads(runs["all"].read_text())
    s1, s2 = (json.loads(runs[k].read_text()) for k in ("s1", "s2"))
    assert whole["schema"] == "forgepatch.smoke-results/2"
    assert len(s1["jobs"]) + len(s2["jobs"]) == len(whole["jobs"]) == whole["plan"]["jobs"] == 8
    assert s1["plan"] == s2["plan"] == whole["plan"] and (s1["shard"], s2["shard"]) == ("1/2", "2/2")
    # sharding interleaves: the concatenation alone is not the unsharded order
    assert [j["id"] for j in s1["jobs"] + s2["jobs"]] != [j["id"] for j in whole["jobs"]]

    out = runs["tmp"] / "merged.json"
    md, junit = runs["tmp"] / "merged.md", runs["tmp"] / "merged.xml"
    r = run_cli("results", "merge", runs["s2"], runs["s1"], "--out", out, "--markdown-out", md, "--junit", junit)
    assert r.returncode == 0, r.stderr
    merged = json.loads(out.read_text())
    assert [j["id"] for j in merged["jobs"]] == [j["id"] for j in whole["jobs"]]
    assert [(j["status"], j["label"], j["failing_phase"]) for j in merged["jobs"]] == \
        [(j["status"], j["label"], j["failing_phase"]) for j in whole["jobs"]]
    assert _table(out) == _table(runs["all"]) == md.read_text()
    assert md.read_text() in r.stdout
    assert merged["summary"] == {**whole["summary"]} and merged["plan"] == whole["plan"]
    assert [s["path"] for s in merged["merged_from"]] == [str(runs["s2"]), str(runs["s1"])]
    assert junit.read_text().count("<testcase ") == 8
    # every job recorded the toolchain it ran on (this host's Python, no torch here)
    assert all(j["toolchain"] and j["toolchain"]["python"] for j in merged["jobs"]), merged["jobs"]


def test_same_file_twice_is_read_once_and_a_missing_shard_is_said(runs):
    out = runs["tmp"] / "one-shard.json"
    r = run_cli("results", "merge", runs["s1"], runs["s1"], "--out", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert len(doc["jobs"]) == len(json.loads(runs["s1"].read_text())["jobs"]) and len(doc["merged_from"]) == 1
    assert "job(s) of the plan are in none of them" in r.stderr


def test_conflicting_duplicates_are_refused_naming_both(runs):
    doc = json.loads(runs["s1"].read_text())
    job = doc["jobs"][0]
    job["status"], job["finished_at"] = "fail", "2030-01-01T00:00:00.000000Z"
    other = runs["tmp"] / "rerun.json"
    other.write_text(json.dumps(doc))
    out = runs["tmp"] / "conflict.json"
    r = run_cli("results", "merge", runs["s1"], other, "--out", out)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"conflicting results for job {job['id']}" in line
    assert f"{runs['s1']} says pass" in line or f"{runs['s1']} says" in line
    assert f"{other} says fail" in line and "2030-01-01" in line
    assert not out.exists()


def test_bad_inputs_are_one_line(runs, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"schema": "forgepatch.smoke-results/9", "jobs": []}))
    for path, words in ((bad, "not a smoke results file"), (newer, "newer than this forgepatch"),
                        (tmp_path / "missing.json", "cannot read")):
        r = run_cli("results", "merge", runs["s1"], path, "--out", tmp_path / "x.json")
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_merge_outputs_are_written_all_or_none_across_a_kill(runs, tmp_path):
    """`results merge --out --markdown-out --junit` killed at each rename in turn (strace): after
    the journal's recovery the three files are all there (from that run) or none is, and the
    next merge says it recovered, in one line."""
    import os
    import shutil
    import subprocess
    import sys

    strace = shutil.which("strace")
    if strace is None:
        if os.environ.get("FORGEPATCH_STRICT"):
            pytest.fail("strace is required (tests/run.sh installs it)")
        pytest.skip("strace not installed")
    src = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src, "PYTHONDONTWRITEBYTECODE": "1"}

    def merge(where, *prefix):
        args = ["results", "merge", str(runs["s1"]), str(runs["s2"]), "--out", str(where / "m.json"),
                "--markdown-out", str(where / "reports" / "m.md"), "--junit", str(where / "reports" / "m.xml")]
        return subprocess.run([*prefix, sys.executable, "-m", "forgepatch", *args], capture_output=True, text=True,
                              env=env, timeout=300)

    want = tmp_path / "want"
    assert merge(want).returncode == 0
    names = ["m.json", "reports/m.md", "reports/m.xml"]
    for n in (1, 2, 3, 4):  # the journal's commit, then one rename per file
        where = tmp_path / f"kill-{n}"
        proc = merge(where, strace, "-f", "--seccomp-bpf", "-qq", "-e", f"inject=rename:signal=KILL:when={n}")
        assert proc.returncode != 0
        subprocess.run([sys.executable, "-c", "import sys; from forgepatch.infra.journal import recover_tree; "
                        "recover_tree(sys.argv[1])", str(where)], env=env, check=True)
        present = [(where / name).is_file() for name in names]
        assert present in ([False] * 3, [True] * 3), (n, present)
        if all(present):
            assert all((where / name).read_bytes() == (want / name).read_bytes() for name in names)
        assert not (where / ".forgepatch").exists()
    where = tmp_path / "kill-next"
    merge(where, strace, "-f", "--seccomp-bpf", "-qq", "-e", "inject=rename:signal=KILL:when=3")
    again = merge(where)
    assert again.returncode == 0, again.stderr
    assert "completed an interrupted results merge" in again.stderr.splitlines()[0]
    assert all((where / name).read_bytes() == (want / name).read_bytes() for name in names)


def test_a_report_set_replaced_is_old_or_new_after_a_kill_or_ctrl_c_at_each_syscall(runs, tmp_path):
    """`results merge --out --markdown-out --junit` over an existing set (the s1 merge), killed
    (SIGKILL) and interrupted (SIGINT) at each of its renames, unlinks, mkdirs and O_CREAT
    opens in the directory: the next report written there (another merge) finds the old set
    or the new one, all three files, and nothing else is left."""
    import shutil

    from support.killmatrix import _cli, crash_matrix, digest

    names = ("m.json", "reports/m.md", "reports/m.xml")

    def args(*shards):
        return ["results", "merge", *map(str, shards), "--out", "m.json", "--markdown-out", "reports/m.md",
                "--junit", "reports/m.xml"]

    old = tmp_path / "old"
    old.mkdir()
    assert _cli(args(runs["s1"]), old).returncode == 0
    new = tmp_path / "new"
    shutil.copytree(old, new)
    assert _cli(args(runs["s1"], runs["s2"]), new).returncode == 0

    def world(d):
        return shutil.copytree(old, d)

    def next_report(d):  # another report set in the same directory: its journal recovers this one
        return _cli(["results", "merge", runs["s2"], "--out", "other.json", "--markdown-out", "reports/other.md",
                     "--json"], d)

    def the_set(d):
        got = {k: v for k, v in digest(d).items() if "other." not in k}
        assert all(n in got for n in names), got  # never a file of the set missing
        return got

    states = crash_matrix(tmp_path, world, args(runs["s1"], runs["s2"]), next_report, original=the_set(old),
                          finished=the_set(new), recovered="results merge", creates=True, inside=True, view=the_set,
                          effective=True)
    assert set(states.values()) == {"original", "finished"}
