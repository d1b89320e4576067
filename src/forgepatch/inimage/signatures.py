"""Failure signatures and phase markers of an SGLang start-up log, as data: THE signature
table (the log monitor, ``forgepatch triage`` and the probe's check failures all read it).

Stdlib only: the server driver imports this inside images that carry SGLang and nothing else.

A *signature* is a regex over one log line. When several match, the one with the highest
``rank`` names the failure (a CUBLAS status is more telling than the ``Capture cuda graph
failed`` wrapper around it, which is more telling than the ``sigquit`` the parent prints
afterwards). ``label`` is a ``str.format`` template over the match's named groups; ``detail``
(default: ``label``) the longer text the probe reports for a failed check, where a ``[...]``
segment is left out when the groups in it did not match. Add a signature by adding a row.

Field knowledge: ``known`` names the public issue(s) where the failure was posted (SGLang,
vLLM, FlashInfer, NCCL, Triton; each row cites its own) and ``workaround`` what
that issue gives as a way around it; both are printed by ``triage`` and in smoke reports. A
``note`` row is a warning, not a failure (a feature switched off, kernels skipped at build
time): it is reported beside the verdict and never decides it.

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
    known: str = ""  # public issue(s) where it was posted, e.g. "SGLang #15650"
    workaround: str = ""  # what that issue gives as a way around it
    note: bool = False  # a warning worth knowing, never the verdict

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern)

    def describe(self, groups: dict[str, str | None], long: bool = False) -> str:
        """``label`` (or, with ``long``, ``detail``) filled with a match's named groups."""
        text = render(self.detail, groups) if long and self.detail else ""
        return text or render(self.label, groups)

    def advice(self) -> str:
        """``known issue: SGLang #15650; workaround: ...`` (empty when the field gave none)."""
        parts = [f"known issue: {self.known}"] if self.known else []
        if self.workaround:
            parts.append(f"workaround: {self.workaround}")
        return "; ".join(parts)


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


_FUSION_OFF = "--disable-flashinfer-allreduce-fusion (a fork: `forgepatch apply` widens the gate)"

SIGNATURES: tuple[Signature, ...] = (
    # -- host and driver faults: nothing in the process can be more telling --------------------
    Signature(
        "driver-xid",
        r"NVRM: Xid (?:\([^)]*\))?:?\s*(?P<xid>\d+)",
        120,
        "NVIDIA driver Xid {xid}",
        summary="a host or driver fault (kernel log), not SGLang: check the node before the code",
        known="open-gpu-kernel-modules #1159",
    ),
    # -- field signatures: specific causes, ranked above the generic errors they carry ---------
    Signature(
        "jit-old-cuda",
        r"SM (?P<sm>\d+\.x) requires CUDA >= (?P<cuda>[\d.]+)",
        105,
        "SM {sm} requires CUDA >= {cuda}",
        summary="a JIT compiler older than the GPU (an old system nvcc picked by FlashInfer's JIT)",
        known="FlashInfer #2577",
        workaround="put a CUDA toolkit that knows the arch first on PATH / CUDA_HOME in the image",
    ),
    Signature(
        "cuda-arch-unsupported",
        r"No supported CUDA architectures found for major versions (?P<majors>\[[^\]]*\])",
        100,
        "No supported CUDA architectures found for major versions {majors}",
        summary="a JIT kernel (e.g. FlashInfer's TRT-LLM all-reduce) has no build for this GPU major",
        known="SGLang #15650 (majors [9, 10] on sm120: the all-reduce fusion auto-enabled); "
              "FlashInfer #2577 (majors [12]: an old nvcc picked by the JIT)",
        workaround=_FUSION_OFF,
    ),
    Signature(
        "triton-ptxas-arch",
        r"ptxas fatal\s*:\s*Value '(?P<arch>sm_\d+[af]?)' is not defined for option 'gpu-name'",
        100,
        "Triton's ptxas does not know {arch}",
        summary="Triton's bundled ptxas is older than the GPU",
        known="Triton #8539",
        workaround="TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas (a CUDA toolkit that knows the arch)",
    ),
    Signature(
        "tllmgen-fmha-arch",
        r"TllmGenFmhaRunner.*Unsupported architecture",
        95,
        "TllmGenFmhaRunner: unsupported architecture",
        summary="attention routed to TRT-LLM-gen FMHA kernels this GPU has no build of (sm120 MLA)",
        known="SGLang #24633",
        workaround="choose an attention backend that supports the arch (--attention-backend)",
    ),
    Signature(
        "trtllm-mha-sm100-only",
        r"TRTLLM MHA backend is only supported on Blackwell GPUs \(SM100\)",
        95,
        "TRTLLM MHA backend is only supported on SM100",
        summary="the trtllm_mha attention backend was chosen on a GPU outside sm100",
        known="SGLang #9140",
        workaround="choose another --attention-backend (e.g. flashinfer or triton)",
    ),
    Signature(
        "deepgemm-arch",
        r"(?:hyperconnection|layout)\.hpp.*(?:Unsupported architecture|Unknown recipe)|DeepGEMM.*Unsupported architecture",
        95,
        "DeepGEMM: unsupported architecture",
        summary="DeepGEMM kernels have no recipe for this arch",
        known="SGLang #25877",
    ),
    Signature(
        "mnnvl-allreduce-fusion",
        r"trtllm_mnnvl_allreduce_fusion",
        95,
        "trtllm_mnnvl_allreduce_fusion failed",
        summary="the MNNVL all-reduce fusion kernel failed (then an illegal memory access)",
        known="SGLang PR #29485 (sm103, single node)",
        workaround=_FUSION_OFF,
    ),
    Signature(
        "custom-allreduce-illegal-access",
        r"custom_all_reduce\.cuh:\d+.*illegal memory access",
        95,
        "custom all-reduce: illegal memory access",
        summary="the custom all-reduce kernel touched memory it does not own (in graph capture)",
        known="vLLM #52457",
        workaround="--disable-custom-all-reduce",
    ),
    Signature(
        "nvls-multicast-oom",
        r"Failed to bind NVLink SHARP \(NVLS\) Multicast memory",
        95,
        "NCCL NVLS multicast memory could not be bound",
        summary="NCCL ran out of NVLS multicast slots (reported as CUDA out of memory)",
        known="NCCL #2077",
        workaround="NCCL_NVLS_ENABLE=0",
    ),
    Signature(
        "nvls-cuda-failure",
        r"transport/nvls\.cc:\d+.*Cuda failure (?P<code>\d+)",
        95,
        "NCCL NVLS: Cuda failure {code}",
        summary="NCCL's NVLS transport failed",
        known="NCCL #1788",
        workaround="NCCL_NVLS_ENABLE=0 or NCCL_ALGO=^NVLS",
    ),
    Signature(
        "batch-prefill-buffer-overflow",
        r"Buffer overflow when allocating memory for (?P<buffer>\w+)",
        92,
        "buffer overflow allocating {buffer}",
        summary="a FlashInfer workspace too small for the captured batch",
        known="vLLM #40023 (B300, graph capture)",
    ),
    Signature(
        "cublas-gemm-execution-failed",
        r"CUBLAS_STATUS_EXECUTION_FAILED when calling `?(?P<call>cublasGemm[A-Za-z0-9_]*)",
        91,
        "CUBLAS_STATUS_EXECUTION_FAILED",
        summary="a cuBLAS GEMM failed to execute (seen on B300, EP with CUDA graphs)",
        detail="CUBLAS_STATUS_EXECUTION_FAILED when calling {call}",
        known="SGLang #31740, #19081 (B300)",
        workaround="on sm103 with EP > 1: --disable-cuda-graph, or the sm103 patch's guard; TP with graphs works",
    ),
    # -- generic errors ------------------------------------------------------------------------
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
        known="SGLang #7249, vLLM #18995",
        workaround="install a kernel wheel built for the arch; `forgepatch audit --arch ARCH --image IMAGE` "
                   "names the library without code for it",
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
        "symm-mem-rendezvous-hang",
        r"_symmetric_memory\S*\s*(?:\.|::|\s)\s*rendezvous|symmetric_memory.*rendezvous",
        65,
        "hang in symmetric-memory rendezvous",
        summary="ranks waited forever in torch's symmetric-memory rendezvous (all-reduce fusion)",
        known="SGLang #29073 (B200 TP8 with fusion)",
        workaround="--enforce-disable-flashinfer-allreduce-fusion",
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
        "module-not-found",
        r"No module named '(?P<module>[\w.]+)'",
        45,
        "No module named '{module}'",
        summary="a Python module the job needs is not importable where it runs (SGLang, or one of its "
                "dependencies, is not installed there)",
        known="SGLang #13276, #4869 (a dependency missing from the environment)",
        workaround="install the missing package where the job runs; `smoke --runner local` puts only the pin's "
                   "patched SGLang first on PYTHONPATH, not its dependencies (or run the pin's image: "
                   "--runner docker)",
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
    # -- notes: warnings worth knowing, never the verdict ----------------------------------------
    Signature(
        "symm-mem-capability",
        r"SymmMemCommunicator: Device capability (?P<cc>[\d.]+) not supported",
        0,
        "symmetric-memory all-reduce off: capability {cc} not supported",
        summary="the symmetric-memory communicator does not know this capability and is off",
        known="vLLM #30630, #31936",
        note=True,
    ),
    Signature(
        "custom-allreduce-pcie-off",
        r"Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs",
        0,
        "custom all-reduce off (more than two PCIe-only GPUs)",
        summary="custom all-reduce is off on PCIe-only boxes with more than two GPUs (slower collectives)",
        known="vLLM #31936 (RTX PRO x4-8)",
        note=True,
    ),
    Signature(
        "nvfp4-not-built",
        r"Not building NVFP4 as no compatible archs were found",
        0,
        "NVFP4 kernels not built (no compatible arch)",
        summary="the kernel build skipped NVFP4 for every arch in its list (CUDA 13 arch names)",
        known="vLLM PR #43573",
        note=True,
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


def advice(signature_id: str | None) -> str:
    """The field knowledge of a signature id (``known issue: ...; workaround: ...``), or ""."""
    sig = SIGNATURE_BY_ID.get(signature_id or "")
    return sig.advice() if sig else ""


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
