"""Phase tracker and failure classifier over a log stream, one line at a time.

Stdlib only (it runs inside images too). ``Monitor.feed(line)`` is cheap and returns the
events that line caused, so a caller streaming a container's log learns of a phase or an error
as soon as the line arrives; ``Monitor.finish(...)`` turns what was seen into a ``Triage``.

Rules worth knowing:
- An error seen *before* the server made further progress (a later phase marker) was
  survived; the signature is chosen among the errors after the last phase reached, and only
  falls back to earlier ones when there are none.
- Among candidates the highest-ranked signature wins, earliest line first (see signatures.py).
- A Python traceback counts once, at its LAST exception (chained tracebacks are followed).
- The word "Exception" alone means nothing: only signatures and real tracebacks count.
- A *note* signature (a warning such as "custom allreduce is disabled") is collected in
  ``Triage.notes`` and never decides the verdict; the verdict's own field knowledge (public
  issue, workaround) is ``Triage.advice``.
"""

from __future__ import annotations

import json
import re
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Iterable

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
_MAX_LINE = 500
_MAX_HITS = 200


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
    notes: list[dict] = field(default_factory=list)  # {id, label, lineno, advice} of note signatures

    @property
    def advice(self) -> str:
        """The verdict's field knowledge: ``known issue: SGLang #15650; workaround: ...``."""
        return signature_advice(self.signature)

    @property
    def summary(self) -> str:
        """One line: ``CUBLAS_STATUS_EXECUTION_FAILED in graph capture (line 812)``."""
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
        sig = SIGNATURE_BY_ID.get(self.signature or "")
        doc["known_issue"] = (sig.known or None) if sig else None
        doc["workaround"] = (sig.workaround or None) if sig else None
        return doc


class Monitor:
    """Feed lines (without newline); read events; ``finish`` for the verdict."""

    def __init__(
        self,
        markers: dict[str, str] | None = None,
        log_path: str | None = None,
        context: int = 3,
        on_event: Callable[[Event], None] | None = None,
    ):
        phases, sigs = with_overrides(markers)
        self._phases: list[tuple[PhaseMarker, re.Pattern[str]]] = [(p, re.compile(p.pattern)) for p in phases]
        self._sigs: list[tuple[Signature, re.Pattern[str]]] = [
            (s, re.compile(s.pattern)) for s in sigs if s.id not in ("traceback", "exit") and not s.note
        ]
        self._notes: list[tuple[Signature, re.Pattern[str]]] = [(s, re.compile(s.pattern)) for s in sigs if s.note]
        self.notes: list[dict] = []
        self._tb_sig = next(s for s in sigs if s.id == "traceback")
        self.log_path = log_path
        self.on_event = on_event
        self.lineno = 0
        self.phases: list[tuple[str, str, int]] = []
        self._seen_phase: set[str] = set()
        self.last_phase: tuple[str, str, int] | None = None
        self.stage = START_STAGE
        self.progress = 0
        self.hits: list[Hit] = []
        self._hit_keys: set[tuple[str, int]] = set()
        self._before: deque[tuple[int, str]] = deque(maxlen=context)
        self._context = context
        self._awaiting_after: list[Hit] = []
        self.exit_code: int | None = None
        self.timed_out = False
        self.toolchain: dict | None = None
        # traceback parser state
        self._tb_active = False
        self._tb_frames = 0
        self._tb_hit: Hit | None = None
        self._tb_chained = False
        # the job's last words (its last output line that is not forgepatch's own), with the
        # lines before it: the error line of a non-zero exit no signature names
        self._last_words: tuple[int, str, list[tuple[int, str]]] | None = None

    # -- feeding ----------------------------------------------------------------------------
    def feed(self, line: str) -> list[Event]:
        line = line.rstrip("\r\n")
        self.lineno += 1
        no = self.lineno
        short = line if len(line) <= _MAX_LINE else line[:_MAX_LINE] + "..."
        for hit in self._awaiting_after:
            hit.after.append((no, short))
        self._awaiting_after = [h for h in self._awaiting_after if len(h.after) < self._context]
        events: list[Event] = []

        for marker, rx in self._phases:
            if rx.search(line):
                events.append(self._phase(marker.id, marker.label, marker.stage, no, short))
                break
        else:
            if m := PROBE_PHASE.search(line):
                name = m["phase"] + (f":{m['check']}" if m["check"] else "")
                state = m["verdict"] or m["state"]
                pid, label = f"probe:{name}" + (f":{state}" if state else ""), f"probe {name}" + (f" {state}" if state else "")
                # the verdict line ends the run: it is not a stage a failure could happen in
                final = m["phase"] == "verdict"
                events.append(self._phase(pid, label, None if final else f"probe {name}", no, short))

        for sig, rx in self._sigs:
            if m := rx.search(line):
                hit = self._hit(sig, sig.describe(m.groupdict()), no, short)
                if hit:
                    events.append(Event("error", sig.id, hit.label, no, short, hit.at))
        for sig, rx in self._notes:
            if (m := rx.search(line)) and all(n["id"] != sig.id for n in self.notes):
                self.notes.append({"id": sig.id, "label": sig.describe(m.groupdict()), "lineno": no,
                                   "advice": sig.advice()})
        if m := _EXIT_LINE.search(line):
            self.exit_code = int(m["code"])
        elif _TIMEOUT_LINE.search(line):
            self.timed_out = True
        elif TOOLCHAIN_PREFIX in line and self.toolchain is None:
            self.toolchain = parse_toolchain(line)

        if ev := self._traceback(line, no, short):
            events.append(ev)
        if line.strip() and not line.lstrip().startswith("[forgepatch"):
            self._last_words = (no, short, list(self._before))
        self._before.append((no, short))
        if self.on_event:
            for ev in events:
                self.on_event(ev)
        return events

    def _phase(self, pid: str, label: str, stage: str | None, no: int, line: str) -> Event:
        """A phase reached; ``stage`` None records it without moving the stage (a final line)."""
        if stage is not None:
            self.progress += 1
            self.stage = stage
        self.last_phase = (pid, label, no)
        if pid not in self._seen_phase:
            self._seen_phase.add(pid)
            self.phases.append((pid, label, no))
        return Event("phase", pid, label, no, line)

    def _hit(self, sig: Signature, label: str, no: int, line: str) -> Hit | None:
        key = (sig.id, self.progress)
        if key in self._hit_keys and sig.id != "traceback":
            return None  # keep the first of each signature per phase
        if len(self.hits) >= _MAX_HITS:
            return None
        self._hit_keys.add(key)
        hit = Hit(sig.id, label, sig.rank, no, line, sig.phase or self.stage, self.progress, list(self._before))
        self.hits.append(hit)
        self._awaiting_after.append(hit)
        return hit

    def _traceback(self, line: str, no: int, short: str) -> Event | None:
        if _TB_HEADER.search(line):
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
            if self._tb_hit is not None:  # chained: the later exception replaces the earlier
                h = self._tb_hit
                h.label, h.lineno, h.line, h.before, h.after = label, no, short, list(self._before), []
                h.stage, h.progress, h.at = self.stage, self.progress, time.monotonic()
                if h not in self._awaiting_after:
                    self._awaiting_after.append(h)
                return Event("error", "traceback", label, no, short, h.at)
            hit = self._hit(self._tb_sig, label, no, short)
            self._tb_hit = hit
            return Event("error", "traceback", label, no, short, hit.at) if hit else None
        if _TB_CHAIN.search(line):
            self._tb_chained = True
        return None

    # -- verdict ----------------------------------------------------------------------------
    def candidates(self) -> tuple[list[Hit], list[Hit]]:
        """(hits after the last phase reached, hits the run progressed past)."""
        active = [h for h in self.hits if h.progress == self.progress]
        return active, [h for h in self.hits if h.progress != self.progress]

    def best(self) -> Hit | None:
        active, recovered = self.candidates()
        pool = active or recovered
        return min(pool, key=lambda h: (-h.rank, h.lineno)) if pool else None

    def finish(self, exit_code: int | None = None, timed_out: bool = False) -> Triage:
        """The verdict. ``exit_code`` None means unknown (a log read after the fact)."""
        code = exit_code if exit_code is not None else self.exit_code
        timed_out = timed_out or self.timed_out
        active, recovered = self.candidates()
        best = self.best()
        sig_id = label = err_line = err_no = stage = None
        context: list[tuple[int, str]] = []
        if best is not None:
            sig_id, label, err_line, err_no, stage = best.signature, best.label, best.line, best.lineno, best.stage
            context = best.before + [(best.lineno, best.line)] + best.after
        elif timed_out:
            sig = SIGNATURE_BY_ID["timeout"]
            sig_id, label, stage = sig.id, sig.label, self.stage
        elif code not in (None, 0):
            sig = SIGNATURE_BY_ID["exit"]
            sig_id, label, stage = sig.id, sig.label.format(code=code), self.stage
            if self._last_words is not None:  # no signature: the job's last words are the error line
                err_no, err_line, before = self._last_words
                context = before + [(err_no, err_line)]
        failed = timed_out or code not in (None, 0) or (code is None and bool(active))
        if not failed and best is not None and not active:
            # every error was survived: report it, but it is not the verdict
            stage = None
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
            notes=list(self.notes),
        )


def triage_lines(lines: Iterable[str], markers: dict[str, str] | None = None, log_path: str | None = None,
                 context: int = 3, exit_code: int | None = None) -> Triage:
    """Run the monitor over a finished log (a probe's log: with its JSON document's verdict)."""
    mon = Monitor(markers, log_path=log_path, context=context)
    lines = list(lines)
    for line in lines:
        mon.feed(line)
    t = mon.finish(exit_code)
    if any(pid.startswith("probe:") for pid, _, _ in mon.phases):
        t = with_probe_verdict(t, extract_json("\n".join(lines)))
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
