"""Flag bisection (ddmin): launch counts against the stand-in server (a labelled test double
whose failure depends on the flags it receives), caching, and the report's wording."""

from __future__ import annotations

import itertools
import json

from forgepatch.smoke.bisect import ddmin, flag_label, split
from support.smoke_matrix import SCHEDULER, profile, processes_with, run_cli, write_matrix


def counted(predicate):
    calls = []

    def test(subset):
        calls.append(tuple(subset))
        return "fail" if predicate(subset) else "pass"

    return test, calls


def test_split_and_single_culprit_is_logarithmic():
    assert split(["a", "b", "c"], 2) == [["a", "b"], ["c"]]
    assert split(list("abcd"), 4) == [["a"], ["b"], ["c"], ["d"]]
    for culprit in "abcdefgh":
        test, calls = counted(lambda s, c=culprit: c in s)
        assert ddmin(list("abcdefgh"), test) == [culprit]
        assert len(calls) <= 2 * 3  # 2 log2(8): binary search when one half always fails


def test_pair_among_four_every_pair_is_found_within_the_quadratic_bound():
    for pair in itertools.combinations("abcd", 2):
        test, calls = counted(lambda s, p=pair: set(p) <= set(s))
        assert ddmin(list("abcd"), test) == list(pair)
        distinct = len(set(calls))
        assert distinct <= 4 * 4 + 3 * 4  # |c|^2 + 3|c|, ddmin's worst case
        if pair == ("a", "c"):
            assert distinct + 1 == PAIR_AC_LAUNCHES  # + the launch of the whole profile


# Hand trace of ddmin for a failure needing {a, c} out of [a, b, c, d]:
#   full [a b c d] F (1)  |  n=2: [a b] P, [c d] P (2)  |  n=4: [a] [b] [c] [d] P (4);
#   complements: [b c d] P, [a c d] F (2) -> n=3 on [a c d]: [a] [c] [d] cached; complements
#   [c d] cached, [a d] P, [a c] F (2) -> [a c], nothing smaller fails.      total: 11 launches
PAIR_AC_LAUNCHES = 11


def bisect_matrix(tmp_path, flags, fail_if, shape="cublas"):
    launches = tmp_path / "launches.jsonl"
    prof = profile("p", flags, env={"FAKE_SGLANG_FAIL_IF": ";".join(fail_if), "FAKE_SGLANG_FAIL": shape,
                                    "FAKE_SGLANG_LAUNCH_LOG": str(launches)})
    return write_matrix(tmp_path / "matrix.toml", {"p": prof}, sm103=["p"]), launches


def run_bisect(matrix, tmp_path, *extra):
    env = {"FORGEPATCH_CACHE_DIR": str(tmp_path / "cache")}
    r = run_cli("--config", str(matrix), "smoke", "--runner", "local", "--bisect", "p", "--pin", "p23", "--json",
                "--logs", str(tmp_path / "logs"), *extra, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["bisect"]


def test_two_flags_both_needed_among_four(tmp_path):
    flags = ["--a-flag 1", "--b-flag", "--c-flag 3", "--d-flag"]
    matrix, launches = bisect_matrix(tmp_path, flags, ["--a-flag 1", "--c-flag 3"])
    rep = run_bisect(matrix, tmp_path)
    assert rep["culprits"] == ["--a-flag 1", "--c-flag 3"]
    assert rep["exonerated"] == ["--b-flag", "--d-flag"]
    assert rep["launches"] == PAIR_AC_LAUNCHES
    assert len(launches.read_text().splitlines()) == PAIR_AC_LAUNCHES  # counted by the server itself
    assert rep["sentence"] == ("--b-flag, --d-flag exonerated; --a-flag 1 + --c-flag 3 together fail with "
                               "CUBLAS_STATUS_EXECUTION_FAILED in graph capture (no smaller subset does)")
    # a rerun is answered from the cache: no launch at all
    again = run_bisect(matrix, tmp_path)
    assert again["launches"] == 0 and again["culprits"] == rep["culprits"]
    assert len(launches.read_text().splitlines()) == PAIR_AC_LAUNCHES
    assert not processes_with(SCHEDULER)


def test_single_culprit_among_three_in_at_most_four_launches(tmp_path):
    flags = ["--tp-size 8", "--ep-size 8", "--enable-flashinfer-allreduce-fusion"]
    counts = {}
    for culprit in flags:
        sub = tmp_path / flag_label(culprit).replace(" ", "_")
        sub.mkdir()
        matrix, launches = bisect_matrix(sub, flags, [culprit])
        rep = run_bisect(matrix, sub)
        assert rep["culprits"] == [culprit]
        assert rep["launches"] == len(launches.read_text().splitlines()) <= 4
        counts[culprit] = rep["launches"]
    assert counts == {"--tp-size 8": 3, "--ep-size 8": 4, "--enable-flashinfer-allreduce-fusion": 3}


def test_report_wording_ep8(tmp_path):
    flags = ["--tp-size 8", "--ep-size 8", "--enable-nccl-nvls", "--enable-flashinfer-allreduce-fusion"]
    matrix, _ = bisect_matrix(tmp_path, flags, ["--ep-size 8"])
    rep = run_bisect(matrix, tmp_path)
    assert rep["sentence"] == ("TP8, NVLS, fusion exonerated; EP8 alone fails with CUBLAS_STATUS_EXECUTION_FAILED "
                               "in graph capture")


def test_passing_profile_has_nothing_to_bisect(tmp_path):
    matrix, launches = bisect_matrix(tmp_path, ["--tp-size 8", "--ep-size 8"], ["--no-such-flag"])
    rep = run_bisect(matrix, tmp_path)
    assert rep["reproduced"] is False and rep["launches"] == 1 and "nothing to bisect" in rep["sentence"]


def test_other_failures_are_not_reduced_to(tmp_path):
    # fails with OOM only when --a and --b are both there, but --a alone fails differently
    # (the stand-in fails with cublas if --a is present): ddmin must not "find" --a alone.
    flags = ["--a 1", "--b 1"]
    launches = tmp_path / "l.jsonl"
    prof = profile("p", flags, env={"FAKE_SGLANG_FAIL_IF": "--a 1", "FAKE_SGLANG_FAIL": "oom",
                                    "FAKE_SGLANG_LAUNCH_LOG": str(launches)})
    matrix = write_matrix(tmp_path / "matrix.toml", {"p": prof}, sm103=["p"])
    rep = run_bisect(matrix, tmp_path)
    assert rep["culprits"] == ["--a 1"] and rep["label"] == "out of memory"
