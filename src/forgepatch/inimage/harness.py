"""Deadlines for probe checks, without torch: an in-process check runs in a worker thread that
the probe stops waiting for at its deadline; a multi-GPU check runs one spawned process per rank,
each reporting its phases through its own pipe, and every rank has a deadline.

A check that crashes or hangs becomes a failed result naming its phase and a signature, never a
hang of the probe. Standard library only.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import multiprocessing.connection as mp_connection
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from forgepatch.inimage.probe_result import FAIL, PASS, CheckResult, signature_of

LOG_PREFIX = "[forgepatch-probe]"


def log_line(**fields: Any) -> None:
    """One log line a monitor can follow, e.g. ``[forgepatch-probe] phase=capture check=bmm begin``.

    Keys with value True print bare (``begin``); None values are left out. Goes to stderr so
    stdout stays one JSON document.
    """
    parts = [LOG_PREFIX]
    for key, value in fields.items():
        if value is None or value is False:
            continue
        if value is True:
            parts.append(key)
        else:
            text = f"{value:.4g}" if isinstance(value, float) else str(value)
            parts.append(f"{key}={text}" if " " not in text else f'{key}="{text}"')
    print(" ".join(parts), file=sys.stderr, flush=True)


class PhaseTracker:
    """Remembers the current phase of one check and logs each transition."""

    def __init__(self, check: str, rank: int | None = None, emit: Callable[..., None] = log_line):
        self.check, self.rank, self.emit = check, rank, emit
        self.current: str | None = None

    def phase(self, name: str) -> None:
        self.current = name
        self.emit(phase=name, check=self.check, rank=self.rank, begin=True)


# -- in-process checks ------------------------------------------------------------------------

CheckFn = Callable[[PhaseTracker], dict[str, Any]]


def run_check(name: str, fn: CheckFn, deadline_s: float, emit: Callable[..., None] = log_line,
              while_waiting: Callable[[], None] | None = None) -> tuple[CheckResult, bool]:
    """Run ``fn(tracker)`` in a daemon thread; wait at most ``deadline_s``, calling
    ``while_waiting()`` every 50 ms meanwhile (e.g. ``RankGroup.poll`` so rank phases are logged
    as they happen).

    ``fn`` returns ``{"ok": bool, "max_error": float, "tolerance": str, "metrics": {...},
    "detail": str}``. Returns (result, hung): ``hung`` means the thread is still running (a
    wedged GPU call); the caller must not use the device again and should exit with
    ``os._exit`` once it has reported.
    """
    tracker = PhaseTracker(name, emit=emit)
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["value"] = fn(tracker)
        except BaseException:  # noqa: BLE001 - any failure of the check is its result
            box["error"] = traceback.format_exc()

    start = time.monotonic()
    worker = threading.Thread(target=body, name=f"check-{name}", daemon=True)
    worker.start()
    end = start + deadline_s
    while True:
        worker.join(max(min(0.05, end - time.monotonic()), 0.0))
        if not worker.is_alive() or time.monotonic() >= end:
            break
        if while_waiting is not None:
            while_waiting()
    seconds = time.monotonic() - start
    if worker.is_alive():
        sig = f"timeout: check {name} did not finish within {deadline_s:g} s"
        emit(phase=tracker.current, check=name, fail=True, signature=sig)
        return CheckResult(name, FAIL, seconds, phase=tracker.current, signature=sig), True
    if "error" in box:
        sig = signature_of(box["error"])
        emit(phase=tracker.current, check=name, fail=True, signature=sig)
        return CheckResult(name, FAIL, seconds, phase=tracker.current, signature=sig,
                           detail=box["error"][-4000:]), False
    value = box.get("value") or {}
    ok = bool(value.get("ok"))
    result = CheckResult(
        name, PASS if ok else FAIL, seconds,
        phase=None if ok else (value.get("phase") or tracker.current),
        signature=None if ok else (value.get("signature") or "result outside tolerance"),
        detail=value.get("detail"),
        max_error=value.get("max_error"),
        tolerance=value.get("tolerance"),
        metrics=value.get("metrics") or {},
    )
    emit(phase="done", check=name, status=result.status, seconds=round(seconds, 4))
    return result, False


# -- one process per rank ---------------------------------------------------------------------

RankFn = Callable[[int, int, dict, "RankReporter"], dict[str, Any]]


class RankReporter:
    """Handed to a rank function in its process: reports phases to the parent.

    Writes go straight into the rank's pipe (no feeder thread, unlike ``multiprocessing.Queue``),
    so the last phase is known to the parent even if the rank is killed right after it.
    """

    def __init__(self, conn: Any, rank: int):
        self.conn, self.rank = conn, rank
        self.current: str | None = None

    def phase(self, name: str) -> None:
        self.current = name
        self.conn.send(("phase", self.rank, name))


def _rank_main(fn: RankFn, rank: int, world: int, params: dict, conn: Any, deadline_s: float) -> None:
    """Entry of a rank process: run ``fn``, send its result or its failure, never raise."""
    # If the rank hangs, dump every thread's stack to stderr shortly before the parent kills it.
    faulthandler.dump_traceback_later(max(deadline_s - 1.0, 0.5), exit=False)
    reporter = RankReporter(conn, rank)
    try:
        result = fn(rank, world, params, reporter)
        conn.send(("result", rank, result))
    except BaseException:  # noqa: BLE001 - report any failure
        text = traceback.format_exc()
        conn.send(("error", rank, reporter.current, signature_of(text), text[-4000:]))
        conn.close()
        os._exit(1)
    conn.close()


@dataclass
class RankOutcome:
    rank: int
    status: str
    phase: str | None = None
    signature: str | None = None
    detail: str | None = None
    exitcode: int | None = None
    seconds: float = 0.0
    result: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"rank": self.rank, "status": self.status, "seconds": round(self.seconds, 4)}
        if self.status == FAIL:
            doc.update(phase=self.phase, signature=self.signature, exitcode=self.exitcode)
            if self.detail:
                doc["detail"] = self.detail
        doc.update(self.result)
        return doc


def _exit_description(code: int | None) -> str:
    if code is None:
        return "closed its pipe but is still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class RankGroup:
    """``world`` spawned processes running ``fn(rank, world, params, reporter)``.

    ``start()`` returns at once (so the parent can do other work while ranks import torch);
    ``wait()`` collects every rank's outcome by the deadline. Each rank has its own pipe, read
    continuously and drained before any process is joined: a child blocked writing a result
    nobody reads never exits, so joining first would wait for the join timeout. A rank whose
    pipe closes without a result crashed. After the first failure the other ranks get
    ``grace_s`` to finish (they are usually stuck in a collective waiting for the failed one);
    ranks still running at the deadline are terminated, then killed.
    """

    def __init__(self, name: str, fn: RankFn, world: int, params: dict | None = None, *,
                 deadline_s: float = 120.0, grace_s: float = 5.0,
                 emit: Callable[..., None] = log_line, env: dict[str, str] | None = None):
        self.name, self.fn, self.world = name, fn, world
        self.params = dict(params or {})
        self.deadline_s, self.grace_s, self.emit = deadline_s, grace_s, emit
        self.env = env or {}
        self._ctx = multiprocessing.get_context("spawn")
        self._conns: dict[Any, int] = {}  # open reader -> rank
        self._procs: list[Any] = []
        self.started_at = 0.0
        self.collected = False  # wait() or abort() ran: no rank process is left
        self._outcomes: dict[int, RankOutcome] = {}
        self._phases: dict[int, str | None] = {r: None for r in range(world)}

    def start(self) -> "RankGroup":
        self.started_at = time.monotonic()
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)  # spawned children inherit the parent's environment
        try:
            for rank in range(self.world):
                reader, writer = self._ctx.Pipe(duplex=False)
                proc = self._ctx.Process(
                    target=_rank_main, name=f"{self.name}-rank{rank}",
                    args=(self.fn, rank, self.world, self.params, writer, self.deadline_s),
                    daemon=True,
                )
                proc.start()
                writer.close()  # the child holds the write end now; EOF here means it is gone
                self._conns[reader] = rank
                self._procs.append(proc)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.emit(phase="spawn", check=self.name, ranks=self.world, begin=True)
        return self

    def _handle(self, msg: tuple, outcomes: dict[int, RankOutcome], phases: dict[int, str | None]) -> None:
        kind, rank = msg[0], msg[1]
        now = time.monotonic() - self.started_at
        if kind == "phase":
            phases[rank] = msg[2]
            self.emit(phase=msg[2], check=self.name, rank=rank, begin=True)
        elif kind == "result" and rank not in outcomes:
            result = dict(msg[2] or {})
            ok = bool(result.pop("ok", False))
            phase = result.pop("phase", None) or phases.get(rank)
            sig = result.pop("signature", None)
            outcome = RankOutcome(rank, PASS if ok else FAIL, phase=None if ok else phase,
                                  signature=None if ok else (sig or "result outside tolerance"),
                                  seconds=now, result=result)
            outcomes[rank] = outcome
            self.emit(phase="done", check=self.name, rank=rank, status=outcome.status,
                      signature=outcome.signature)
        elif kind == "error" and rank not in outcomes:
            _, _, phase, sig, text = msg
            outcomes[rank] = RankOutcome(rank, FAIL, phase=phase or phases.get(rank), signature=sig,
                                         detail=text, seconds=now)
            self.emit(phase=phase, check=self.name, rank=rank, fail=True, signature=sig)

    def _drain(self, outcomes: dict, phases: dict, timeout: float) -> None:
        """Read every message that arrives within ``timeout`` s; a pipe at EOF whose rank has no
        outcome is a crash."""
        end = time.monotonic() + timeout
        while self._conns:
            ready = mp_connection.wait(list(self._conns), max(end - time.monotonic(), 0.0))
            if not ready:
                return
            for conn in ready:
                rank = self._conns[conn]
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    del self._conns[conn]
                    conn.close()
                    if rank not in outcomes:
                        self._crashed(rank, outcomes, phases)
                    continue
                self._handle(msg, outcomes, phases)

    def _crashed(self, rank: int, outcomes: dict, phases: dict) -> None:
        proc = self._procs[rank]
        proc.join(2.0)  # its pipe is closed: it is exiting
        sig = f"rank {rank} {_exit_description(proc.exitcode)}"
        outcomes[rank] = RankOutcome(rank, FAIL, phase=phases[rank], signature=sig,
                                     exitcode=proc.exitcode, seconds=time.monotonic() - self.started_at)
        self.emit(phase=phases[rank], check=self.name, rank=rank, fail=True, signature=sig)

    def poll(self) -> None:
        """Handle what the ranks have sent so far, without blocking (logs their phases now)."""
        self._drain(self._outcomes, self._phases, 0.0)

    def wait(self) -> list[RankOutcome]:
        outcomes, phases = self._outcomes, self._phases
        deadline = self.started_at + self.deadline_s
        while len(outcomes) < self.world:
            now = time.monotonic()
            if now >= deadline:
                break
            self._drain(outcomes, phases, min(0.2, deadline - now))
            if any(o.status == FAIL for o in outcomes.values()):
                deadline = min(deadline, time.monotonic() + self.grace_s)
        for rank in range(self.world):
            if rank not in outcomes:
                waited = time.monotonic() - self.started_at
                sig = f"timeout: rank {rank} did not finish within {waited:.1f} s"
                outcomes[rank] = RankOutcome(rank, FAIL, phase=phases[rank], signature=sig,
                                             seconds=waited)
                self.emit(phase=phases[rank], check=self.name, rank=rank, fail=True, signature=sig)
        self._stop()
        self.collected = True
        return [outcomes[r] for r in range(self.world)]

    def abort(self) -> None:
        """Stop every rank without collecting outcomes (the probe decided not to run the check)."""
        self._stop()
        self.collected = True

    def _stop(self) -> None:
        """Terminate what still runs, then join (briefly: nothing is left to read or write)."""
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        for conn in list(self._conns):  # unblock children writing to a pipe nobody will read
            conn.close()
        self._conns.clear()
        end = time.monotonic() + 3.0
        for proc in self._procs:
            proc.join(max(end - time.monotonic(), 0.0))
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
                proc.join(2.0)


def _ranked(outcome: "RankOutcome | None") -> str | None:
    """``rank N: <signature>``, unless the signature already names its rank."""
    if outcome is None:
        return None
    sig = outcome.signature or ""
    return sig if sig.startswith(f"rank {outcome.rank} ") else f"rank {outcome.rank}: {sig}"


def rank_check_result(name: str, outcomes: list[RankOutcome], seconds: float) -> CheckResult:
    """Fold per-rank outcomes into one check: pass only if every rank passed. The root cause
    names the phase and signature: a rank that crashed or raised is preferred over one that
    merely timed out waiting for it (on two H200s, a killed rank 1 left rank 0 hanging in
    the all-reduce; "rank 1 killed by SIGKILL" is the answer, not rank 0's timeout)."""
    failed = [o for o in outcomes if o.status != PASS]
    errors = [o.result.get("max_error") for o in outcomes if o.result.get("max_error") is not None]
    causes = [o for o in failed if not (o.signature or "").startswith("timeout")]
    first = (causes or failed)[0] if failed else None
    return CheckResult(
        name, FAIL if failed else PASS, seconds,
        phase=first.phase if first else None,
        signature=_ranked(first),
        max_error=max(errors) if errors else None,
        tolerance=next((o.result.get("tolerance") for o in outcomes if o.result.get("tolerance")), None),
        ranks=[o.as_dict() for o in outcomes],
    )
