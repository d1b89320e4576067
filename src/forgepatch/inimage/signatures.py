"""Failure signatures and phase markers of an SGLang start-up log, as data: THE signature
table (the log monitor, ``forgepatch triage`` and the probe's check failures all read it).

Stdlib only: the server driver imports this inside images that carry SGLang and nothing else.

A *signature* is a regex over one log line. When several match, the one with the highest
``rank`` names the failure (a CUBLAS status is more telling than the ``Capture cuda graph
failed`` wrapper around it, which is more telling than the ``sigquit`` the parent prints
afterwards). ``label`` is a ``str.format`` template over the match's named groups; ``detail``
(default: ``label``) the longer text the probe reports for a failed check, where a ``[...]``
segment is left out when the groups in it did not match. Add a signature by adding a row.

A *phase marker* is a regex whose first match means the server reached that milestone;
``stage`` names what the server is doing after it (the "failing phase" when an error follows).
Markers change between SGLang releases: a pin's ``markers`` table in matrix.toml overrides
any entry here by id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: str
    rank: int
    label: str  # str.format template over named groups; plain text if none
    phase: str | None = None  # the failing phase this signature implies, if any
    summary: str = ""
    detail: str | None = None  # the probe's text for it (default: label)

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern)

    def describe(self, groups: dict[str, str | None], long: bool = False) -> str:
        """``label`` (or, with ``long``, ``detail``) filled with a match's named groups."""
        text = render(self.detail, groups) if long and self.detail else ""
        return text or render(self.label, groups)


def render(template: str, groups: dict[str, str | None]) -> str:
    """``str.format`` over ``groups`` (None -> ""), dropping each ``[...]`` segment whose
    groups are all empty; the template itself when a group is unknown."""
    values = {k: (v or "").strip() for k, v in groups.items()}

    def segment(m: re.Match[str]) -> str:
        names = re.findall(r"{(\w+)}", m.group(1))
        return m.group(1) if any(values.get(n) for n in names) else ""

    try:
        return re.sub(r"\[([^\[\]]*)\]", segment, template).format(**values)
    except (KeyError, IndexError):
        return template


@dataclass(frozen=True)
class PhaseMarker:
    id: str
    pattern: str
    label: str  # "CUDA graph capture finished": what reaching it means
    stage: str  # what runs after it: the failing phase of an error that follows


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "cuda-arch-unsupported",
        r"No supported CUDA architectures found for major versions (?P<majors>\[[^\]]*\])",
        100,
        "No supported CUDA architectures found for major versions {majors}",
        summary="a JIT kernel (e.g. FlashInfer's TRT-LLM all-reduce) has no build for this GPU major",
    ),
    Signature(
        "cublas",
        r"(?P<status>CUBLAS_STATUS_[A-Z_]+)(?: when calling `?(?P<call>[A-Za-z0-9_]+))?",
        90,
        "{status}",
        summary="a cuBLAS call failed",
        detail="{status}[ when calling {call}]",
    ),
    Signature(
        "illegal-memory-access",
        r"an illegal memory access was encountered",
        90,
        "CUDA illegal memory access",
        summary="a kernel touched memory it does not own",
        detail="CUDA error: an illegal memory access was encountered",
    ),
    Signature(
        "no-kernel-image",
        r"no kernel image is available for execution on the device",
        75,
        "no kernel image is available for execution on the device",
        summary="a kernel library was built without this GPU's arch",
    ),
    Signature(
        "nccl-error",
        r"(?P<nccl>NCCL error[^\n]*)|(?P<code>nccl(?:InternalError|UnhandledCudaError|SystemError|InvalidUsage|RemoteError))"
        r"|ProcessGroupNCCL.*(?:error|Error)",
        80,
        "NCCL error",
        summary="a collective failed",
        detail="[{nccl}][{code}]",
    ),
    Signature(
        "oom",
        r"(?:\S*OutOfMemoryError: )?(?P<what>CUDA out of memory|[Oo]ut of memory)|OutOfMemoryError"
        r"|Not enough memory\. Please try",
        80,
        "out of memory",
        summary="GPU memory exhausted",
        detail="[{what}]",
    ),
    Signature(
        "cuda-error",
        r"CUDA error: (?P<what>[^.\n]+)",
        70,
        "CUDA error: {what}",
        summary="a CUDA runtime call failed",
    ),
    Signature(
        "capture-failed",
        r"(?i)Capture (?:\S+ )?cuda graph failed",
        60,
        "Capture cuda graph failed",
        phase="graph capture",
        summary="CUDA graph capture raised",
    ),
    Signature(
        "capture-invalidated",
        r"operation not permitted when stream is capturing|cudaErrorStreamCapture(?P<what>\w+)",
        60,
        "CUDA stream capture invalidated",
        phase="graph capture",
        summary="a call that is not allowed during CUDA graph capture (e.g. a first cuBLAS use)",
    ),
    Signature(
        "watchdog",
        r"(?i)watchdog timeout|watchdog caught collective operation timeout",
        50,
        "watchdog timeout",
        summary="a watchdog declared the process hung",
    ),
    Signature(
        "traceback",
        r"(?!x)x",  # found by the traceback parser, not by a line regex
        40,
        "{exception}",
        summary="a Python exception (the last one of its traceback)",
    ),
    Signature(
        "sigquit",
        r"Received sigquit from a child process",
        30,
        "sigquit from a child process",
        summary="a child process died and the launcher gave up",
    ),
    Signature(
        "no-graph-capture",
        r"\[forgepatch-server\] no-graph-capture",
        25,
        "server ready but no CUDA graph capture was logged",
        summary="check this pin's capture markers, or pass --disable-cuda-graph",
    ),
    Signature(
        "generation-failed",
        r"\[forgepatch-server\] generation-failed(?: (?P<why>.*))?",
        25,
        "generation failed: {why}",
        phase="first request",
        summary="/health answered but a real chat completion did not",
    ),
    Signature(
        "timeout",
        r"\[forgepatch(?:-server)?\] timeout(?: (?P<why>.*))?",
        20,
        "timeout",
        summary="no verdict before the time limit (hang)",
    ),
    Signature(
        "exit",
        r"(?!x)x",  # set from the exit code, not from a line
        10,
        "exit code {code}",
        summary="the process exited non-zero",
    ),
)

PHASES: tuple[PhaseMarker, ...] = (
    PhaseMarker("args", r"server_args=ServerArgs\(", "arguments parsed", "initialisation"),
    PhaseMarker("load_begin", r"Load weight begin", "weight loading began", "weight loading"),
    PhaseMarker("load_end", r"Load weight end", "weights loaded", "KV cache allocation"),
    PhaseMarker("kv_cache", r"KV Cache is allocated", "KV cache allocated", "CUDA graph setup"),
    PhaseMarker("capture_begin", r"(?i)Capture (?:\S+ )?cuda graph begin", "CUDA graph capture began", "graph capture"),
    PhaseMarker("capture_end", r"(?i)Capture (?:\S+ )?cuda graph end", "CUDA graph capture finished", "warm-up"),
    PhaseMarker("server_ready", r"The server is fired up and ready to roll!", "server reported ready", "first request"),
    PhaseMarker("answered", r"\[forgepatch-server\] answered", "first real request answered", "serving"),
)

# Probe phase lines: ``[forgepatch-probe] phase=capture check=bmm begin``, with ``rank=N`` on a
# rank's lines and ``verdict=V`` on the last; the state is a bare word (``begin``, ``fail``),
# never the key of a ``key=value`` field.
PROBE_PHASE = re.compile(
    r"\[forgepatch-probe\] phase=(?P<phase>\S+)(?: check=(?P<check>\S+))?(?: rank=(?P<rank>\d+))?"
    r"(?: verdict=(?P<verdict>\S+))?(?: (?P<state>\w+)(?=\s|$))?"
)

START_STAGE = "start-up"
MARKER_IDS = frozenset(p.id for p in PHASES) | frozenset(s.id for s in SIGNATURES)
SIGNATURE_BY_ID = {s.id: s for s in SIGNATURES}


def with_overrides(overrides: dict[str, str] | None) -> tuple[tuple[PhaseMarker, ...], tuple[Signature, ...]]:
    """The phase markers and signatures with a pin's ``markers`` overrides applied (by id).

    Raises ``ValueError`` naming the key for an unknown id or a regex that does not compile.
    """
    overrides = dict(overrides or {})
    for key, pattern in overrides.items():
        if key not in MARKER_IDS:
            raise ValueError(f"unknown marker {key!r} (known: {', '.join(sorted(MARKER_IDS))})")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"marker {key!r}: bad regex {pattern!r}: {exc}") from None
    phases = tuple(replace(p, pattern=overrides[p.id]) if p.id in overrides else p for p in PHASES)
    sigs = tuple(replace(s, pattern=overrides[s.id]) if s.id in overrides else s for s in SIGNATURES)
    return phases, sigs
