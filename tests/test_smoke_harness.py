"""Deadlines for probe checks, with real threads and real spawned rank processes (no torch):
a check or a rank that hangs, crashes or raises becomes a failed result with its phase and a
signature, in bounded time — never a hang."""

from __future__ import annotations

import os
import signal
import time

from forgepatch.inimage.harness import PhaseTracker, RankGroup, rank_check_result, run_check
from forgepatch.inimage.probe_result import FAIL, PASS


class Recorder:
    def __init__(self):
        self.lines = []

    def __call__(self, **fields):
        self.lines.append(fields)


# -- rank functions (module level: spawned processes import them by name) ---------------------

def passing_rank(rank, world, params, reporter):
    reporter.phase("init")
    reporter.phase("compute")
    return {"ok": True, "max_error": 0.0, "metrics": {"sum": world * (world + 1) // 2, "rank": rank},
            "blob": "x" * params.get("payload", 0)}


def hanging_rank(rank, world, params, reporter):
    reporter.phase("init")
    if rank == params["hang"]:
        reporter.phase("replay")
        time.sleep(600)
    return {"ok": True}


def raising_rank(rank, world, params, reporter):
    reporter.phase("capture")
    if rank == 1:
        raise RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error")
    time.sleep(600)  # a healthy peer stuck waiting for the failed rank in a collective
    return {"ok": True}


def crashing_rank(rank, world, params, reporter):
    reporter.phase("capture")
    if rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)  # like a segfault in a driver call
    return {"ok": True, "max_error": 0.0}


def wrong_rank(rank, world, params, reporter):
    reporter.phase("compare")
    return {"ok": rank != 1, "max_error": 3.0 if rank == 1 else 0.0}


# -- in-process checks ------------------------------------------------------------------------

def test_run_check_pass_logs_phases():
    rec = Recorder()

    def fn(tracker):
        tracker.phase("capture")
        tracker.phase("replay")
        return {"ok": True, "max_error": 0.0, "metrics": {"replay_us": 35.0}}

    result, hung = run_check("bmm", fn, 5.0, emit=rec)
    assert not hung and result.status == PASS and result.metrics == {"replay_us": 35.0}
    assert [l["phase"] for l in rec.lines] == ["capture", "replay", "done"]
    assert rec.lines[0] == {"phase": "capture", "check": "bmm", "rank": None, "begin": True}


def test_run_check_out_of_tolerance_is_a_fail_with_phase():
    result, hung = run_check("mlp", lambda t: {"ok": False, "max_error": 9.0, "phase": "compare",
                                               "detail": "mlp graph~eager: max |error| 9"}, 5.0, emit=Recorder())
    assert result.status == FAIL and result.phase == "compare" and result.max_error == 9.0
    assert result.signature == "result outside tolerance"


def test_run_check_exception_gives_signature_and_phase():
    def fn(tracker):
        tracker.phase("capture")
        raise RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmStridedBatchedEx(h)`")

    result, hung = run_check("bmm", fn, 5.0, emit=Recorder())
    assert not hung and result.status == FAIL and result.phase == "capture"
    assert result.signature == "CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmStridedBatchedEx"
    assert "Traceback" in result.detail


def test_run_check_that_hangs_stops_at_its_deadline():
    def fn(tracker):
        tracker.phase("replay")
        time.sleep(60)

    t0 = time.monotonic()
    result, hung = run_check("bmm", fn, 0.5, emit=Recorder())
    assert time.monotonic() - t0 < 2.0
    assert hung and result.status == FAIL and result.phase == "replay"
    assert result.signature.startswith("timeout: check bmm did not finish within 0.5 s")


def test_phase_tracker_remembers_current_phase():
    rec = Recorder()
    tracker = PhaseTracker("allreduce", rank=1, emit=rec)
    tracker.phase("init")
    assert tracker.current == "init" and rec.lines[-1]["rank"] == 1


# -- one process per rank ---------------------------------------------------------------------

def test_rank_group_all_pass_with_large_results_returns_promptly():
    # 4 MB per rank: more than a pipe buffer, so joining before draining would block (the pitfall).
    rec = Recorder()
    t0 = time.monotonic()
    outcomes = RankGroup("allreduce", passing_rank, 3, {"payload": 4 << 20}, deadline_s=60, emit=rec).start().wait()
    elapsed = time.monotonic() - t0
    assert [o.status for o in outcomes] == [PASS] * 3
    assert [o.result["metrics"]["rank"] for o in outcomes] == [0, 1, 2]
    assert all(len(o.result["blob"]) == 4 << 20 for o in outcomes)
    assert elapsed < 20, elapsed
    phases = [(l.get("rank"), l["phase"]) for l in rec.lines]
    assert all((r, "compute") in phases for r in range(3))
    check = rank_check_result("allreduce", outcomes, elapsed)
    assert check.status == PASS and check.max_error == 0.0 and len(check.ranks) == 3


def test_rank_that_hangs_fails_at_the_deadline_with_its_phase():
    t0 = time.monotonic()
    group = RankGroup("allreduce", hanging_rank, 2, {"hang": 1}, deadline_s=4.0, emit=Recorder()).start()
    outcomes = group.wait()
    elapsed = time.monotonic() - t0
    assert elapsed < 4.0 + 6.0, elapsed  # deadline + terminate/join slack, not the sleep
    assert outcomes[0].status == PASS
    hung = outcomes[1]
    assert hung.status == FAIL and hung.phase == "replay"
    assert hung.signature.startswith("timeout: rank 1 did not finish")
    assert not any(p.is_alive() for p in group._procs)
    check = rank_check_result("allreduce", outcomes, elapsed)
    assert check.status == FAIL and check.phase == "replay" and check.signature.startswith("rank 1: timeout")


def test_rank_that_raises_fails_and_stuck_peers_get_only_the_grace():
    t0 = time.monotonic()
    outcomes = RankGroup("allreduce", raising_rank, 3, deadline_s=60, grace_s=1.0, emit=Recorder()).start().wait()
    elapsed = time.monotonic() - t0
    assert elapsed < 20, elapsed  # far from the 60 s deadline
    assert outcomes[1].status == FAIL and outcomes[1].phase == "capture"
    assert outcomes[1].signature == "NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error"
    assert "RuntimeError" in outcomes[1].detail
    for peer in (outcomes[0], outcomes[2]):
        assert peer.status == FAIL and peer.signature.startswith("timeout") and peer.phase == "capture"
    check = rank_check_result("allreduce", outcomes, elapsed)
    # the root cause, not the first failed rank by number: the peers only timed out waiting
    assert check.signature == "rank 1: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error"
    assert check.phase == "capture"


def test_rank_that_crashes_is_reported_with_its_signal():
    outcomes = RankGroup("allreduce", crashing_rank, 2, deadline_s=60, emit=Recorder()).start().wait()
    assert outcomes[0].status == FAIL and outcomes[0].phase == "capture"
    assert outcomes[0].signature == "rank 0 killed by SIGKILL" and outcomes[0].exitcode == -9
    assert outcomes[1].status == PASS


def test_rank_with_wrong_result_fails_without_a_crash():
    outcomes = RankGroup("allreduce", wrong_rank, 2, deadline_s=60, emit=Recorder()).start().wait()
    assert [o.status for o in outcomes] == [PASS, FAIL]
    assert outcomes[1].signature == "result outside tolerance" and outcomes[1].phase == "compare"
    assert rank_check_result("allreduce", outcomes, 1.0).max_error == 3.0


def test_rank_group_sets_child_env_without_leaking_it():
    os.environ.pop("FORGEPATCH_TEST_CHILD_ENV", None)
    group = RankGroup("env", env_rank, 1, deadline_s=60, env={"FORGEPATCH_TEST_CHILD_ENV": "0"}, emit=Recorder())
    outcomes = group.start().wait()
    assert outcomes[0].result["seen"] == "0"
    assert "FORGEPATCH_TEST_CHILD_ENV" not in os.environ


def env_rank(rank, world, params, reporter):
    return {"ok": True, "seen": os.environ.get("FORGEPATCH_TEST_CHILD_ENV")}


def injected_rank(rank, world, params, reporter):
    from forgepatch.inimage.probe_checks import _FaultInjectingReporter

    reporter = _FaultInjectingReporter(reporter, rank, params["inject"])
    reporter.phase("init")
    reporter.phase("capture")
    return {"ok": True}


def test_fault_injector_hangs_or_crashes_the_named_rank_at_the_named_phase():
    hang = RankGroup("x", injected_rank, 2, {"inject": "hang@1:capture"}, deadline_s=3, emit=Recorder()).start().wait()
    assert hang[0].status == PASS and hang[1].phase == "capture" and hang[1].signature.startswith("timeout")
    crash = RankGroup("x", injected_rank, 2, {"inject": "crash@0:init"}, deadline_s=30, emit=Recorder()).start().wait()
    assert crash[0].phase == "init" and crash[0].signature == "rank 0 killed by SIGKILL" and crash[1].status == PASS


def test_fault_injector_rejects_a_bad_spec():
    import pytest

    from forgepatch.inimage.probe_checks import _FaultInjectingReporter

    for spec in ("explode@1:capture", "hang@x:capture", "hang@1", "hang"):
        with pytest.raises(ValueError):
            _FaultInjectingReporter(None, 0, spec)


def test_rank_phases_are_logged_while_a_local_check_runs():
    rec = Recorder()
    group = RankGroup("allreduce", passing_rank, 2, deadline_s=60, emit=rec).start()

    def slow_check(tracker):
        time.sleep(3.0)  # long enough for both ranks to start and report
        return {"ok": True}

    result, hung = run_check("bmm", slow_check, 10.0, emit=rec, while_waiting=group.poll)
    assert result.status == PASS and not hung
    done_at = next(i for i, l in enumerate(rec.lines) if l.get("check") == "bmm" and l["phase"] == "done")
    early = [(l.get("rank"), l["phase"]) for l in rec.lines[:done_at] if l.get("check") == "allreduce"]
    assert (0, "compute") in early and (1, "compute") in early, rec.lines
    outcomes = group.wait()  # results that arrived during the check are kept
    assert [o.status for o in outcomes] == [PASS, PASS]
