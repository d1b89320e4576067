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
        text = text or render(self.label, groups)
        enum = groups.get("cuda_enum") or groups.get("cuda_name")
        code = groups.get("cuda_code") or groups.get("cuda_num")
        if enum or code:  # matched by a CUDA error's name or number: say which
            err = CUDA_ERROR_BY_NAME.get(enum or "") or CUDA_ERROR_BY_CODE.get(int(code or -1))
            name = enum or (err.runtime if err else "")
            num = code or (str(err.number) if err else "")
            text += f" ({name}" + (f", code {num}" if num else "") + ")"
        return text

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
    Signature(
        "ptx-too-new",
        r"the provided PTX was compiled with an unsupported toolchain"
        r"|CUDA driver version is insufficient for CUDA runtime version",
        93,
        "PTX or CUDA toolkit newer than the driver",
        summary="kernels built by a CUDA toolkit newer than the driver (a PTX ISA the driver's JIT does not know)",
        known="NVIDIA/FasterTransformer #551; cuda_memtest #31 (toolkit 11.3, older driver)",
        workaround="install a driver that supports the toolkit that built the kernels (nvidia-smi shows the "
                   "driver's CUDA version), or build them with a toolkit no newer than the driver",
    ),
    Signature(
        "ptx-invalid",
        r"a PTX JIT compilation failed",
        93,
        "the driver could not JIT the PTX",
        summary="PTX the driver refused: built for a newer virtual arch than this GPU (compute_120 PTX on sm_90), "
                "or corrupt",
        known="SGLang #7249, vLLM #18995 (the kernel wheel has no code for the GPU)",
        workaround="build the kernels with SASS for this GPU or PTX for a virtual arch no newer than it; "
                   "`forgepatch audit --arch ARCH --image IMAGE` names the library without code for it",
    ),
    Signature(
        "triton-shared-memory",
        r"OutOfResources: out of resource: shared memory,? ?Required: (?P<need>\d+),? ?Hardware limit: (?P<limit>\d+)",
        92,
        "Triton kernel needs {need} B of shared memory, the GPU has {limit} B",
        summary="a Triton config tuned for a GPU with more shared memory per block (datacenter defaults on "
                "sm120/sm121, whose limit is 101376 B)",
        known="SGLang #28019, #21782 (fused-MoE defaults on sm121/sm120), SGLang PR #28038; Triton #8182",
        workaround="use a Triton config tuned for this GPU (SGLang: a fused_moe config JSON for the device), or "
                   "lower BLOCK sizes / num_stages until the tiles fit",
    ),
    Signature(
        "cublas-invalid-value",
        r"CUBLAS_STATUS_INVALID_VALUE(?: when calling `?(?P<call>[A-Za-z0-9_]+))?"
        r"|On entry to (?P<fn>\w+)\s+parameter number (?P<param>\d+) had an illegal value",
        91,
        "CUBLAS_STATUS_INVALID_VALUE[ when calling {call}][: {fn} parameter {param} is illegal]",
        summary="cuBLAS refused the call's arguments before running anything (shapes, leading dimensions, "
                "pointer mode): a caller or shape bug, not a GPU fault (EXECUTION_FAILED is the GPU fault)",
        known="OpenNMT/CTranslate2 #1490, ztxz16/fastllm #277 (batch 15: m < k and m < n)",
        workaround="check the GEMM's shapes and leading dimensions (cuBLAS prints `parameter number N had an "
                   "illegal value`); with torch, also the CUDA/cuBLAS pair the wheel was built for",
    ),
    Signature(
        "nccl-duplicate-gpu",
        r"Duplicate GPU detected : (?P<what>rank \d+ and rank \d+ both on CUDA device \w+)",
        89,
        "NCCL: duplicate GPU ({what})",
        summary="two ranks of one communicator on the same GPU (a device map or CUDA_VISIBLE_DEVICES mistake)",
        known="NVIDIA/Megatron-LM #661, NCCL #1241",
        workaround="one GPU per rank: torch.cuda.set_device(local_rank) before init_process_group, and check "
                   "CUDA_VISIBLE_DEVICES of each process",
    ),
    Signature(
        "nccl-no-socket",
        r"Bootstrap : no (?:NCCL_SOCKET_IFNAME )?socket interface found|no socket interface found",
        89,
        "NCCL: no socket interface found",
        summary="NCCL's bootstrap found no network interface to use (NCCL_SOCKET_IFNAME names none that exists)",
        known="NCCL #1837 (NCCL_SOCKET_IFNAME set to a missing interface), NCCL #286",
        workaround="set NCCL_SOCKET_IFNAME to an interface the host has (`ip -br link`), or unset it "
                   "(default ^lo,docker)",
    ),
    Signature(
        "nccl-watchdog-timeout",
        r"Watchdog caught collective operation timeout: WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?OpType=(?P<op>\w+)"
        r".*?\) ran for (?P<ran>\d+) milliseconds",
        88,
        "NCCL watchdog: {op} timed out after {ran} ms",
        summary="a collective never completed: a rank hung, died or diverged, or a kernel held the stream "
                "ahead of it (the watchdog then takes the process down)",
        detail="NCCL watchdog: {op}[ (SeqNum {seq})] timed out after {ran} ms",
        known="PyTorch #118369, SGLang #1693",
        workaround="find the rank that did not reach the collective (its log's first error or its stack in the "
                   "flight recorder, TORCH_NCCL_TRACE_BUFFER_SIZE); raise the timeout only for a legitimately "
                   "long step",
    ),
    Signature(
        "misaligned-address",
        r"(?<![\w-])misaligned address",
        90,
        "CUDA misaligned address",
        summary="a kernel read or wrote through a pointer not aligned to its access size",
    ),
    Signature(
        "launch-failure",
        r"unspecified launch failure",
        88,
        "CUDA unspecified launch failure",
        summary="a kernel faulted on the GPU (the CUDA equivalent of a segfault)",
    ),
    # -- CUDA graph capture rules: each can only happen while a stream is capturing -----------
    Signature(
        "capture-unsupported",
        r"operation not permitted when stream is capturing",
        78,
        "a call not permitted while the stream is capturing",
        phase="graph capture",
        summary="a synchronising call ran inside CUDA graph capture (synchronize, .item(), a sync allocation, "
                "a first cuBLAS use)",
        known="PyTorch #87794, onnxruntime #15002",
        workaround="do the call (or the first use that triggers it) in warm-up before capture; the first "
                   "traceback names it",
    ),
    Signature(
        "capture-unjoined",
        r"capturing stream has unjoined work",
        78,
        "capturing stream has unjoined work",
        phase="graph capture",
        summary="work forked onto a side stream during capture was never joined back before capture ended",
        known="deepseek-ai/DeepEP #62",
        workaround="join every side stream back into the capturing stream (capture_stream.wait_stream(side)) "
                   "before capture ends",
    ),
    Signature(
        "capture-cpu-copy",
        r"Cannot copy between CPU and CUDA tensors during CUDA graph capture",
        78,
        "CPU<->CUDA copy of an unpinned tensor during graph capture",
        phase="graph capture",
        summary="torch refuses a copy from pageable CPU memory inside capture (it would not be replayed)",
        known="PyTorch PR #172156 (the check), PyTorch #171894",
        workaround="pin the CPU tensor (pin_memory=True) or move the copy out of the captured region",
    ),
    Signature(
        "capture-rule",
        r"operation would result in a merge of separate capture sequences"
        r"|capture was not ended in the same stream as it began"
        r"|dependency created on uncaptured work in another stream"
        r"|operation would make the legacy stream depend on a capturing blocking stream",
        76,
        "a CUDA stream capture rule was broken",
        phase="graph capture",
        summary="capture crossed a stream or capture-sequence boundary CUDA forbids",
        known="NVIDIA/warp #653 (legacy stream during capture)",
        workaround="capture on one non-default stream and join every fork back to it",
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
        58,  # below every class a CUDA error maps to, and below the capture wrapper that carries it
        "CUDA error[: {what}]",
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
        r"(?i)Capture (?:\S+ )?cuda graph failed(?::\s*(?P<cause>\S.*))?",
        60,
        "Capture cuda graph failed[: {cause}]",
        phase="graph capture",
        summary="CUDA graph capture raised",
    ),
    Signature(
        "capture-invalidated",
        r"operation failed due to a previous error during capture",
        62,
        "CUDA stream capture invalidated",
        phase="graph capture",
        summary="capture failed because of an earlier error in it: the first capture error is the cause",
        known="google-deepmind/mujoco_warp #425",
        workaround="look above for the capture's first error (a call not permitted while capturing)",
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
        "unknown-crash",
        r"^.*?: line \d+:\s+\d+ (?P<shell>Segmentation fault|Bus error|Aborted|Killed|Illegal instruction"
        r"|Floating point exception|Trace/breakpoint trap)"
        r"|^\s*(?P<bare>Segmentation fault|Bus error|Aborted|Killed|Illegal instruction|Floating point exception)"
        r"(?: \(core dumped\))?\s*$"
        r"|(?P<fatal>Fatal Python error: .+)"
        r"|(?P<throw>terminate called (?:after throwing an instance of \S+|without an active exception))"
        r"|Signal \d+ \((?P<signal>SIG\w+)\) received by PID"
        r"|process \d+ terminated with signal (?P<tsignal>SIG\w+)",
        15,
        "process died: {shell}{bare}{fatal}{throw}{signal}{tsignal}",
        summary="the process died (a signal, an abort, a fatal runtime error) and no known signature names why: "
                "not ok; the lines before it are the evidence",
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
    # A line a note matches is never an error line (SGLang's retraction mentions "out of memory").
    Signature(
        "decode-retract",
        r"Decode out of memory happened|KV cache pool is full\. Retract requests",
        0,
        "the scheduler retracted requests (KV cache full) and went on",
        summary="recovered: SGLang's scheduler retracts running requests when the KV cache is full and "
                "re-queues them; frequent retraction costs throughput (lower --max-running-requests or raise "
                "--mem-fraction-static), it does not end the run",
        note=True,
    ),
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



@dataclass(frozen=True)
class CudaError:
    """One CUDA error enum: its number, its runtime (``cudaError*``) and driver (``CUDA_ERROR_*``)
    names, and the signature it is evidence of. Error checks in the CUDA samples' style print only
    ``code=N(name)``; torch prints the runtime name after its message; cupy the driver name."""

    number: int
    runtime: str
    driver: str
    signature: str


CUDA_ERRORS: tuple[CudaError, ...] = (
    CudaError(2, "cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY", "oom"),
    CudaError(35, "cudaErrorInsufficientDriver", "", "ptx-too-new"),
    CudaError(209, "cudaErrorNoKernelImageForDevice", "CUDA_ERROR_NO_BINARY_FOR_GPU", "no-kernel-image"),
    CudaError(218, "cudaErrorInvalidPtx", "CUDA_ERROR_INVALID_PTX", "ptx-invalid"),
    CudaError(222, "cudaErrorUnsupportedPtxVersion", "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "ptx-too-new"),
    CudaError(700, "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS", "illegal-memory-access"),
    CudaError(714, "cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR", "launch-failure"),
    CudaError(715, "cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "launch-failure"),
    CudaError(716, "cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned-address"),
    CudaError(717, "cudaErrorInvalidAddressSpace", "CUDA_ERROR_INVALID_ADDRESS_SPACE", "launch-failure"),
    CudaError(718, "cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC", "launch-failure"),
    CudaError(719, "cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED", "launch-failure"),
    CudaError(900, "cudaErrorStreamCaptureUnsupported", "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "capture-unsupported"),
    CudaError(901, "cudaErrorStreamCaptureInvalidated", "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "capture-invalidated"),
    CudaError(902, "cudaErrorStreamCaptureMerge", "CUDA_ERROR_STREAM_CAPTURE_MERGE", "capture-rule"),
    CudaError(903, "cudaErrorStreamCaptureUnmatched", "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture-rule"),
    CudaError(904, "cudaErrorStreamCaptureUnjoined", "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capture-unjoined"),
    CudaError(905, "cudaErrorStreamCaptureIsolation", "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "capture-rule"),
    CudaError(906, "cudaErrorStreamCaptureImplicit", "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "capture-rule"),
    CudaError(907, "cudaErrorCapturedEvent", "CUDA_ERROR_CAPTURED_EVENT", "capture-rule"),
    CudaError(908, "cudaErrorStreamCaptureWrongThread", "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "capture-rule"),
)
CUDA_ERROR_BY_NAME = {n: e for e in CUDA_ERRORS for n in (e.runtime, e.driver) if n}
CUDA_ERROR_BY_CODE = {e.number: e for e in CUDA_ERRORS}
# the number forms: the CUDA samples' ``code=209(cudaErrorNoKernelImageForDevice)`` and
# ``CUDA error 900:`` / ``Cuda failure 209`` (NCCL, onnxruntime, warp). A bare ``code=2`` never counts
# (``[forgepatch] exit code=2``). Each form starts with a literal, so a line costs one scan.
_CODE_FORM = (r"code=(?P<cuda_code>{codes})\((?P<cuda_name>\w+)\)"
              r"|(?:CUDA|Cuda|cuda) (?:error|failure|Error|Failure):? (?P<cuda_num>{codes})\b")
_ANY_ENUM = (r"\b(?P<cuda_enum>cudaError[A-Z]\w*|CUDA_ERROR_[A-Z_]+)|code=(?P<cuda_code>\d+)\((?P<cuda_name>\w+)\)"
             r"|(?:CUDA|Cuda|cuda) (?:error|failure|Error|Failure):? (?P<cuda_num>\d+)\b")


def _with_cuda_errors(sig: Signature) -> Signature:
    """``sig`` also matching the names and numbers of the CUDA errors that are evidence of it."""
    if sig.id == "cuda-error":  # any other CUDA error name or number: a CUDA error all the same
        return replace(sig, pattern=f"{sig.pattern}|{_ANY_ENUM}")
    errs = [e for e in CUDA_ERRORS if e.signature == sig.id]
    if not errs:
        return sig
    names = "|".join(n for e in errs for n in (e.runtime, e.driver) if n)
    codes = "|".join(str(e.number) for e in errs)
    return replace(sig, pattern=f"{sig.pattern}|(?P<cuda_enum>{names})\\b|{_CODE_FORM.format(codes=codes)}")


SIGNATURES = tuple(_with_cuda_errors(s) for s in SIGNATURES)

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
