"""Phase tracker and failure classifier over a log stream, one line at a time.

Stdlib only (it runs inside images too). ``Monitor.feed(line)`` is cheap and returns the
events that line caused, so a caller streaming a container's log learns of a phase or an error
as soon as the line arrives; ``Monitor.finish(...)`` turns what was seen into a ``Triage``.

Rules worth knowing (README "How triage decides"):
- An error seen *before* the server made further progress (a later phase marker, or a scheduler
  heartbeat such as SGLang's ``Decode batch`` line) was survived; the signature is chosen among
  the errors after the last progress, and only falls back to earlier ones when there are none.
- Among candidates the highest-ranked signature wins, earliest line first (see signatures.py):
  rank is consequence (a watchdog timeout that took the process down outranks torch's prose
  around it; the first capture error outranks the "capture invalidated" that follows it).
- A Python traceback counts once, at its LAST exception (chained tracebacks are followed). Its
  frame and source lines (indented, and C++ ``frame #N:`` lines) are never an error line.
- The word "Exception" alone means nothing: only signatures and real tracebacks count.
- A *note* signature (a warning such as "custom allreduce is disabled", or a recovered
  retraction) is collected in ``Triage.notes`` and never decides the verdict; a line a note
  matches is not an error line. The verdict's own field knowledge is ``Triage.advice``.
- A process that died (a shell's ``Segmentation fault`` line, ``Fatal Python error``, an exit
  code of a signal) with no known signature is ``unknown-crash``: failed, never ok.
- ``ok`` needs positive evidence (``Triage.evidence``: the readiness marker, exit code 0, the
  probe's pass document); without it and without a failure the verdict is ``unverified``.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Iterable

from forgepatch.inimage.prefilter import Prefilter
from forgepatch.inimage.imported import IMPORTED_PREFIX
from forgepatch.inimage.imported import parse_line as parse_imported
from forgepatch.inimage.toolchain import TOOLCHAIN_PREFIX
from forgepatch.inimage.toolchain import parse_line as parse_toolchain
from forgepatch.inimage.signatures import (
    PROBE_PHASE,
    SIGNATURE_BY_ID,
    START_STAGE,
    PhaseMarker,
    Signature,
    with_overrides,
)
from forgepatch.inimage.signatures import advice as signature_advice

_TB_HEADER = re.compile(r"Traceback \(most recent call last\):")
_TB_CHAIN = re.compile(r"The above exception was the direct cause|During handling of the above exception")
_EXC_LINE = re.compile(r"^(?P<exc>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
_EXIT_LINE = re.compile(r"\[forgepatch\] exit code=(?P<code>-?\d+)")
_TIMEOUT_LINE = re.compile(r"\[forgepatch\] timeout")
_BEAT = re.compile(r"\b(?:Decode|Prefill) batch[ ,\[]")  # SGLang's scheduler is still computing
_FRAME = re.compile(r"^frame #\d+: ")  # a C++ stack frame torch prints under its errors
_LAST_ERROR = re.compile(r"Last error:\s*$")  # NCCL: the reason follows on the next line
_ERRORISH = ("error", "fail", "fatal", "exception", "abort", "assert", "illegal", "denied", "refused", "cannot")
_NOT_A_CAUSE = frozenset({"capture-failed", "sigquit", "unknown-crash", "timeout", "exit"})
_MAX_LINE = 500
_MAX_HITS = 200
_JSON_TAIL = 4000  # lines kept for the probe's JSON document (it is printed last)


def _errorish(line: str) -> bool:
    lower = line.lower()
    return any(w in lower for w in _ERRORISH)


def _death_by_code(code: int | None) -> str | None:
    """``SIGSEGV`` for an exit code that means a signal killed the process (-11, or 139 from a shell)."""
    if code is None or code == 0:
        return None
    num = -code if code < 0 else code - 128 if 128 < code < 160 else None
    if num in (signal.SIGSEGV, signal.SIGABRT, signal.SIGKILL, signal.SIGBUS, signal.SIGILL, signal.SIGFPE):
        return signal.Signals(num).name
    return None


@dataclass
class Event:
    kind: str  # "phase" | "error"
    id: str  # phase id or signature id
    label: str
    lineno: int
    line: str
    at: float = field(default_factory=time.monotonic)


@dataclass
class Hit:
    signature: str
    label: str
    rank: int
    lineno: int
    line: str
    stage: str
    progress: int  # how many phase events had happened when it was seen
    before: list[tuple[int, str]] = field(default_factory=list)
    after: list[tuple[int, str]] = field(default_factory=list)
    at: float = field(default_factory=time.monotonic)


@dataclass
class Triage:
    """What a log says: the record every smoke job and ``forgepatch triage`` produce."""

    failed: bool
    last_phase: str | None  # phase id, e.g. "capture_begin"
    last_phase_label: str | None
    last_phase_lineno: int | None
    failing_phase: str | None  # the stage an error interrupted, e.g. "graph capture"
    signature: str | None  # signature id, e.g. "cublas"
    label: str | None  # e.g. "CUBLAS_STATUS_EXECUTION_FAILED"
    error_line: str | None  # the first line carrying that signature
    error_lineno: int | None
    context: list[tuple[int, str]] = field(default_factory=list)
    exit_code: int | None = None
    timed_out: bool = False
    log_path: str | None = None
    lines: int = 0
    phases: list[tuple[str, str, int]] = field(default_factory=list)  # (id, label, lineno)
    also_seen: list[str] = field(default_factory=list)  # other signature ids after the last phase
    recovered: list[str] = field(default_factory=list)  # signature ids the run progressed past
    toolchain: dict | None = None  # what a [forgepatch-toolchain] line reported
    imported: dict | None = None  # what a [forgepatch-imported] line reported (inimage.imported)
    notes: list[dict] = field(default_factory=list)  # {id, label, lineno, count, advice} of note signatures
    evidence: str | None = None  # what proves the run was healthy: "server reported ready (line 9)"

    @property
    def verdict(self) -> str:
        """``failed``; ``ok`` only with positive evidence; else ``unverified`` (never ok by absence)."""
        return "failed" if self.failed else "ok" if self.evidence else "unverified"

    @property
    def advice(self) -> str:
        """The verdict's field knowledge: ``known issue: SGLang #15650; workaround: ...``."""
        return signature_advice(self.signature)

    @property
    def summary(self) -> str:
        """One line: ``CUBLAS_STATUS_EXECUTION_FAILED in graph capture (line 812)``."""
        if not self.failed and not self.evidence:
            return (f"unverified: no failure signature, but no evidence of health either (last phase: "
                    f"{self.last_phase_label or 'none'}; expected the readiness marker)")
        if not self.failed and not self.signature:
            return f"ok (last phase: {self.last_phase_label or 'none'})"
        text = self.label or "failed"
        if self.failing_phase:
            text += f" in {self.failing_phase}"
        if self.error_lineno:
            text += f" (line {self.error_lineno})"
        return text

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["context"] = [{"lineno": n, "line": t} for n, t in self.context]
        doc["phases"] = [{"id": i, "label": lbl, "lineno": n} for i, lbl, n in self.phases]
        doc["summary"] = self.summary
        doc["verdict"] = self.verdict
        sig = SIGNATURE_BY_ID.get(self.signature or "")
        doc["known_issue"] = (sig.known or None) if sig else None
        doc["workaround"] = (sig.workaround or None) if sig else None
        return doc


class Monitor:
    """Feed lines (without newline); read events; ``finish`` for the verdict.

    Memory stays bounded on any log length: errors since the last progress are kept (at most
    ``_MAX_HITS``), survived ones only as the first of each signature."""

    def __init__(
        self,
        markers: dict[str, str] | None = None,
        log_path: str | None = None,
        context: int = 3,
        on_event: Callable[[Event], None] | None = None,
    ):
        phases, sigs = with_overrides(markers)
        # each regex behind a literal pre-check (prefilter.py): most lines cost substring tests only
        self._phases: list[tuple[PhaseMarker, re.Pattern[str]]] = [(p, re.compile(p.pattern)) for p in phases]
        self._sigs: list[tuple[Signature, re.Pattern[str]]] = [
            (s, re.compile(s.pattern)) for s in sigs if s.id not in ("traceback", "exit") and not s.note
        ]
        self._notes: list[tuple[Signature, re.Pattern[str]]] = [(s, re.compile(s.pattern)) for s in sigs if s.note]
        self._pre = Prefilter([p.pattern for p in phases] + [s.pattern for s, _ in self._notes]
                              + [s.pattern for s, _ in self._sigs])
        self.notes: list[dict] = []
        self._tb_sig = next(s for s in sigs if s.id == "traceback")
        self.log_path = log_path
        self.on_event = on_event
        self.lineno = 0
        self.phases: list[tuple[str, str, int]] = []
        self._seen_phase: set[str] = set()
        self.last_phase: tuple[str, str, int] | None = None
        self.stage = START_STAGE
        self.progress = 0  # phase markers reached
        self.active: list[Hit] = []  # errors since the last progress (phase or heartbeat)
        self._active_ids: set[str] = set()
        self.survived: dict[str, Hit] = {}  # the first error of each signature the run went on from
        self.ready: tuple[str, int] | None = None  # (label, lineno) of the readiness marker
        self._before: deque[tuple[int, str]] = deque(maxlen=context)
        self._errorish: deque[tuple[int, str]] = deque(maxlen=5)  # the last error-like lines
        self._context = context
        self._awaiting_after: list[Hit] = []
        self._awaiting_reason: Hit | None = None  # an NCCL error whose "Last error:" reason follows
        self.exit_code: int | None = None
        self.timed_out = False
        self.toolchain: dict | None = None
        self.imported: dict | None = None
        # traceback parser state
        self._tb_active = False
        self._tb_frames = 0
        self._tb_hit: Hit | None = None
        self._tb_chained = False
        # the job's last words (its last output line that is not forgepatch's own), with the
        # lines before it: the error line of a non-zero exit no signature names
        self._last_words: tuple[int, str, list[tuple[int, str]]] | None = None

    @property
    def hits(self) -> list[Hit]:
        return list(self.survived.values()) + self.active

    # -- feeding ----------------------------------------------------------------------------
    def feed(self, line: str) -> list[Event]:
        line = line.rstrip("\r\n")
        self.lineno += 1
        no = self.lineno
        short = line if len(line) <= _MAX_LINE else line[:_MAX_LINE] + "..."
        if self._awaiting_after:
            for hit in self._awaiting_after:
                hit.after.append((no, short))
            self._awaiting_after = [h for h in self._awaiting_after if len(h.after) < self._context]
        events: list[Event] = []

        possible = self._pre.possible(line)  # [phases..., notes..., signatures...]
        n_phases, n_notes = len(self._phases), len(self._notes)
        for (marker, rx), can in zip(self._phases, possible):
            if can and rx.search(line):
                events.append(self._phase(marker.id, marker.label, marker.stage, no, short))
                break
        if not events and "[forgepatch-probe]" in line and (m := PROBE_PHASE.search(line)):
            name = m["phase"] + (f":{m['check']}" if m["check"] else "")
            state = m["verdict"] or m["state"]
            pid, label = f"probe:{name}" + (f":{state}" if state else ""), f"probe {name}" + (f" {state}" if state else "")
            # the verdict line ends the run: it is not a stage a failure could happen in
            final = m["phase"] == "verdict"
            events.append(self._phase(pid, label, None if final else f"probe {name}", no, short))
        if ("Decode batch" in line or "Prefill batch" in line) and _BEAT.search(line):
            self._progressed()
            if self.ready:  # the scheduler is computing batches: requests are being served
                self.stage = "serving"

        # a frame or source line of a traceback (or a C++ stack frame) is never the error line
        in_frames = (self._tb_active and line[:1] in (" ", "\t")) or (line.startswith("frame #")
                                                                      and _FRAME.match(line) is not None)
        noted = False
        if not in_frames:
            noted = self._note(line, possible[n_phases:n_phases + n_notes], no)
        if self._awaiting_reason is not None and line.strip() and not in_frames:
            hit, self._awaiting_reason = self._awaiting_reason, None
            if hit.label == SIGNATURE_BY_ID["nccl-error"].label:
                hit.label = f"NCCL error: {short.strip()}"
        if not in_frames and not noted:
            for (sig, rx), can in zip(self._sigs, possible[n_phases + n_notes:]):
                if can and (m := rx.search(line)):
                    hit = self._hit(sig, sig.describe(m.groupdict()), no, short)
                    if hit:
                        events.append(Event("error", sig.id, hit.label, no, short, hit.at))
        if "Last error:" in line and _LAST_ERROR.search(line):
            self._awaiting_reason = next((h for h in reversed(self.active) if h.signature == "nccl-error"), None)
        if "[forgepatch" in line:
            if m := _EXIT_LINE.search(line):
                self.exit_code = int(m["code"])
            elif _TIMEOUT_LINE.search(line):
                self.timed_out = True
            elif TOOLCHAIN_PREFIX in line and self.toolchain is None:
                self.toolchain = parse_toolchain(line)
            elif IMPORTED_PREFIX in line and self.imported is None:
                self.imported = parse_imported(line)

        if ev := self._traceback(line, no, short):
            events.append(ev)
        if line.strip() and not line.lstrip().startswith("[forgepatch"):
            self._last_words = (no, short, list(self._before))
            if not in_frames and _errorish(line):
                self._errorish.append((no, short))
        self._before.append((no, short))
        if self.on_event:
            for ev in events:
                self.on_event(ev)
        return events

    def _note(self, line: str, possible: list[bool], no: int) -> bool:
        """Record the note signatures ``line`` matches (first line and count of each)."""
        noted = False
        for (sig, rx), can in zip(self._notes, possible):
            if can and (m := rx.search(line)):
                noted = True
                seen = next((n for n in self.notes if n["id"] == sig.id), None)
                if seen:
                    seen["count"] += 1
                else:
                    self.notes.append({"id": sig.id, "label": sig.describe(m.groupdict()), "lineno": no,
                                       "count": 1, "advice": sig.advice()})
        return noted

    def _progressed(self) -> None:
        """The run went on: the errors seen so far were survived."""
        for h in self.active:
            self.survived.setdefault(h.signature, h)
        self.active, self._active_ids, self._awaiting_reason = [], set(), None

    def _phase(self, pid: str, label: str, stage: str | None, no: int, line: str) -> Event:
        """A phase reached; ``stage`` None records it without moving the stage (a final line)."""
        if stage is not None:
            self.progress += 1
            self.stage = stage
            self._progressed()
        if pid in ("server_ready", "answered"):
            self.ready = (label, no)
        self.last_phase = (pid, label, no)
        if pid not in self._seen_phase:
            self._seen_phase.add(pid)
            self.phases.append((pid, label, no))
        return Event("phase", pid, label, no, line)

    def _hit(self, sig: Signature, label: str, no: int, line: str) -> Hit | None:
        if sig.id in self._active_ids and sig.id != "traceback":
            return None  # keep the first of each signature since the last progress
        if len(self.active) >= _MAX_HITS:
            return None
        self._active_ids.add(sig.id)
        hit = Hit(sig.id, label, sig.rank, no, line, sig.phase or self.stage, self.progress, list(self._before))
        self.active.append(hit)
        self._awaiting_after.append(hit)
        return hit

    def _traceback(self, line: str, no: int, short: str) -> Event | None:
        if "Traceback" in line and _TB_HEADER.search(line):
            if not (self._tb_chained and self._tb_hit is not None):
                self._tb_hit = None
            self._tb_active, self._tb_frames, self._tb_chained = True, 0, False
            return None
        if self._tb_active:
            if line[:1] in (" ", "\t"):
                self._tb_frames += "File " in line
                return None
            m = _EXC_LINE.match(line.strip()) if self._tb_frames else None
            if not m:
                if not line.strip():
                    return None
                if not self._tb_frames:
                    self._tb_active = False
                return None  # another process's line interleaved into the traceback
            self._tb_active = False
            label = self._tb_sig.describe({"exception": short.strip()})
            if self._tb_hit is not None and self._tb_hit in self.active:  # chained: the later replaces the earlier
                h = self._tb_hit
                h.label, h.lineno, h.line, h.before, h.after = label, no, short, list(self._before), []
                h.stage, h.progress, h.at = self.stage, self.progress, time.monotonic()
                if h not in self._awaiting_after:
                    self._awaiting_after.append(h)
                return Event("error", "traceback", label, no, short, h.at)
            hit = self._hit(self._tb_sig, label, no, short)
            self._tb_hit = hit
            return Event("error", "traceback", label, no, short, hit.at) if hit else None
        if ("above exception" in line) and _TB_CHAIN.search(line):
            self._tb_chained = True
        return None

    # -- verdict ----------------------------------------------------------------------------
    def candidates(self) -> tuple[list[Hit], list[Hit]]:
        """(hits after the last progress, the first hit of each signature the run progressed past)."""
        return list(self.active), list(self.survived.values())

    def best(self) -> Hit | None:
        pool = self.active or list(self.survived.values())
        return min(pool, key=lambda h: (-h.rank, h.lineno)) if pool else None

    def _label(self, best: Hit) -> str:
        """The winner's label; a wrapper's ("Capture cuda graph failed") carries its inner cause."""
        if best.signature != "capture-failed" or ":" in best.label:  # its own line named the cause
            return best.label
        inner = [h for h in self.active if h.signature not in _NOT_A_CAUSE]
        cause = min(inner, key=lambda h: (-h.rank, h.lineno)) if inner else None
        return f"{best.label}: {cause.label}" if cause else best.label

    def _context_of(self, best: Hit) -> list[tuple[int, str]]:
        lines = best.before + [(best.lineno, best.line)] + best.after
        if best.signature == "unknown-crash":  # no signature says why: show the last error-like lines too
            lines = [ln for ln in self._errorish if ln[0] < best.lineno] + lines
        return sorted(dict(lines).items())

    def finish(self, exit_code: int | None = None, timed_out: bool = False) -> Triage:
        """The verdict. ``exit_code`` None means unknown (a log read after the fact)."""
        code = exit_code if exit_code is not None else self.exit_code
        timed_out = timed_out or self.timed_out
        active, recovered = self.candidates()
        best = self.best()
        sig_id = label = err_line = err_no = stage = None
        context: list[tuple[int, str]] = []
        died = _death_by_code(code)
        if best is not None:
            sig_id, label, err_line, err_no, stage = best.signature, self._label(best), best.line, best.lineno, best.stage
            context = self._context_of(best)
        elif timed_out:
            sig = SIGNATURE_BY_ID["timeout"]
            sig_id, label, stage = sig.id, sig.label, self.stage
        elif code not in (None, 0):
            sig = SIGNATURE_BY_ID["unknown-crash" if died else "exit"]
            sig_id, stage = sig.id, self.stage
            label = f"process died: {died} (exit code {code})" if died else sig.label.format(code=code)
            if self._last_words is not None:  # no signature: the job's last words are the error line
                err_no, err_line, before = self._last_words
                context = sorted(dict([ln for ln in self._errorish if ln[0] < err_no] + before
                                      + [(err_no, err_line)]).items())
        failed = timed_out or code not in (None, 0) or (code is None and bool(active))
        if not failed and best is not None and not active:
            # every error was survived: report it, but it is not the verdict
            stage = None
        evidence = None
        if not failed:
            if self.ready:
                evidence = f"{self.ready[0]} (line {self.ready[1]})"
            elif code == 0:
                evidence = "exit code 0"
        last = self.last_phase
        return Triage(
            failed=failed,
            last_phase=last[0] if last else None,
            last_phase_label=last[1] if last else None,
            last_phase_lineno=last[2] if last else None,
            failing_phase=stage if failed else None,
            signature=sig_id,
            label=label,
            error_line=err_line,
            error_lineno=err_no,
            context=context,
            exit_code=code,
            timed_out=timed_out,
            log_path=self.log_path,
            lines=self.lineno,
            phases=list(self.phases),
            also_seen=sorted({h.signature for h in active} - {sig_id}),
            recovered=sorted({h.signature for h in recovered}),
            toolchain=self.toolchain,
            imported=self.imported,
            notes=list(self.notes),
            evidence=evidence,
        )


def triage_lines(lines: Iterable[str], markers: dict[str, str] | None = None, log_path: str | None = None,
                 context: int = 3, exit_code: int | None = None) -> Triage:
    """Run the monitor over a finished log (a probe's log: with its JSON document's verdict).
    ``lines`` is streamed: only the last lines are kept, for the probe's JSON document."""
    mon = Monitor(markers, log_path=log_path, context=context)
    tail: deque[str] = deque(maxlen=_JSON_TAIL)
    for line in lines:
        mon.feed(line)
        tail.append(line.rstrip("\r\n"))
    t = mon.finish(exit_code)
    if any(pid.startswith("probe:") for pid, _, _ in mon.phases):
        t = with_probe_verdict(t, extract_json("\n".join(tail)))
    return t


def extract_json(text: str) -> dict | None:
    """The last JSON object in ``text`` that starts at the beginning of a line."""
    decoder = json.JSONDecoder()
    starts = [i for i in range(len(text)) if text[i] == "{" and (i == 0 or text[i - 1] == "\n")]
    for start in reversed(starts):
        try:
            doc, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def with_probe_verdict(t: Triage, doc: dict | None) -> Triage:
    """A failed probe's own verdict instead of the generic ``exit code N``: signature
    ``probe-<verdict>``, label ``probe <verdict>: <reason>``, failing phase that of the first
    failed check (else where the log stopped). A specific signature from the log still wins."""
    verdict = (doc or {}).get("verdict")
    if verdict == "pass" and not t.failed:
        return replace(t, evidence="probe verdict pass")
    if verdict not in ("fail", "incompatible") or t.signature not in (None, "exit"):
        return t
    reason = doc.get("reason") or doc.get("detail") or doc.get("error") or ""
    failed = next((c for c in doc.get("checks") or [] if isinstance(c, dict) and c.get("status") == "fail"
                   and c.get("phase")), None)
    phase = f"probe {failed['phase']}:{failed['name']}" if failed else t.failing_phase
    return replace(t, failed=True, signature=f"probe-{verdict}",
                   label=f"probe {verdict}" + (f": {reason}" if reason else ""), failing_phase=phase)


class LineSplitter:
    """Turn arbitrary byte chunks (a container's log stream) into complete text lines."""

    def __init__(self) -> None:
        self._buf = b""

    def push(self, chunk: bytes) -> list[str]:
        self._buf += chunk
        if b"\n" not in chunk:
            return []
        *lines, self._buf = self._buf.split(b"\n")
        return [ln.decode("utf-8", "replace") for ln in lines]

    def flush(self) -> list[str]:
        rest, self._buf = self._buf, b""
        return [rest.decode("utf-8", "replace")] if rest else []
