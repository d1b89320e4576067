"""``forgepatch triage`` on real failure logs (issue 24) and the rules they need.

The logs under tests/fixtures/logs/ were made on an H200 by docs/gpu-runs/triage-logs/
make-triage-logs.sh (each fault in its own process, stdout+stderr unedited; ENV.txt and RC.txt
beside them say what ran, and how each process ended). The two noisy serving logs (>= 20k lines,
gzipped) are real torch processes printing SGLang's own log formats with recovered warnings,
ending in a real failure of that process.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forgepatch.inimage.monitor import triage_lines
from forgepatch.inimage.prefilter import Prefilter
from forgepatch.inimage.signatures import CUDA_ERRORS, SIGNATURE_BY_ID, SIGNATURES

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "fixtures" / "logs"


@functools.lru_cache(maxsize=None)
def triaged(name: str):
    return triage_lines(lines_of(name))


@functools.lru_cache(maxsize=None)
def lines_of(name: str) -> list[str]:
    path = LOGS / name
    text = gzip.decompress(path.read_bytes()).decode() if name.endswith(".gz") else path.read_text()
    return text.splitlines()


# file -> (signature, failing phase, error line contains, label (exact), advice contains or None)
REAL = {
    "segfault.log": ("unknown-crash", "start-up", "Segmentation fault", "process died: Segmentation fault", None),
    "fatal-python-segfault.log": ("unknown-crash", "start-up", "Fatal Python error: Segmentation fault",
                                  "process died: Fatal Python error: Segmentation fault", None),
    "aborted.log": ("unknown-crash", "start-up", "Aborted", "process died: Aborted", None),
    "killed.log": ("unknown-crash", "start-up", "Killed", "process died: Killed", None),
    "no-kernel-image-code209.log": (
        "no-kernel-image", "start-up", "code=209(cudaErrorNoKernelImageForDevice)",
        "no kernel image is available for execution on the device (cudaErrorNoKernelImageForDevice, code 209)",
        "forgepatch audit"),
    "ptx120-on-sm90.log": (
        "no-kernel-image", "start-up", "code=209(cudaErrorNoKernelImageForDevice)",
        "no kernel image is available for execution on the device (cudaErrorNoKernelImageForDevice, code 209)",
        "SGLang #7249"),
    "ptx-isa-too-new.log": ("ptx-too-new", "start-up", "code=222(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)",
                            "PTX or CUDA toolkit newer than the driver (CUDA_ERROR_UNSUPPORTED_PTX_VERSION, code 222)",
                            "FasterTransformer #551"),
    "ptx-too-new-cupy.log": ("ptx-too-new", "start-up", "CUDADriverError: CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
                             "PTX or CUDA toolkit newer than the driver (CUDA_ERROR_UNSUPPORTED_PTX_VERSION, code 222)",
                             "driver"),
    "ptx-arch-too-new.log": ("ptx-invalid", "start-up", "code=218(CUDA_ERROR_INVALID_PTX)",
                             "the driver could not JIT the PTX (CUDA_ERROR_INVALID_PTX, code 218)", "virtual arch"),
    "ptx-invalid.log": ("ptx-invalid", "start-up", "code=218(CUDA_ERROR_INVALID_PTX)",
                        "the driver could not JIT the PTX (CUDA_ERROR_INVALID_PTX, code 218)", "virtual arch"),
    "watchdog-timeout.log": ("nccl-watchdog-timeout", "start-up", "Watchdog caught collective operation timeout",
                             "NCCL watchdog: ALLREDUCE timed out after 8064 ms", "PyTorch #118369"),
    "duplicate-gpu.log": ("nccl-duplicate-gpu", "start-up", "Duplicate GPU detected",
                          "NCCL: duplicate GPU (rank 0 and rank 1 both on CUDA device 60)", "one GPU per rank"),
    "nccl-no-socket-interface.log": ("nccl-no-socket", "start-up", "Bootstrap : no socket interface found",
                                     "NCCL: no socket interface found", "NCCL_SOCKET_IFNAME"),
    "triton-shared-memory.log": ("triton-shared-memory", "start-up", "OutOfResources: out of resource: shared memory",
                                 "Triton kernel needs 1048576 B of shared memory, the GPU has 232448 B",
                                 "SGLang #28019"),
    "cublas-invalid-value.log": ("cublas-invalid-value", "start-up", "parameter number 8 had an illegal value",
                                 "CUBLAS_STATUS_INVALID_VALUE: SGEMM parameter 8 is illegal", "leading dimensions"),
    "misaligned-address.log": ("misaligned-address", "start-up", "cudaErrorMisalignedAddress: misaligned address",
                               "CUDA misaligned address (cudaErrorMisalignedAddress, code 716)", None),
    "capture-sync.log": ("capture-unsupported", "graph capture", "operation not permitted when stream is capturing",
                         "a call not permitted while the stream is capturing", "PyTorch #87794"),
    "capture-wrapped.log": ("capture-unsupported", "graph capture", "operation not permitted when stream is capturing",
                            "a call not permitted while the stream is capturing", "warm-up"),
    "capture-unjoined.log": ("capture-unjoined", "graph capture", "capturing stream has unjoined work",
                             "capturing stream has unjoined work", "DeepEP #62"),
    "capture-cpu-copy.log": ("capture-cpu-copy", "graph capture", "Cannot copy between CPU and CUDA tensors",
                             "CPU<->CUDA copy of an unpinned tensor during graph capture", "pin_memory=True"),
    "noisy-serving-watchdog.log.gz": ("nccl-watchdog-timeout", "serving", "Watchdog caught collective operation timeout",
                                      "NCCL watchdog: ALLREDUCE timed out after 8092 ms", "SGLang #1693"),
    "noisy-serving-illegal-address.log.gz": (
        "illegal-memory-access", "serving", "CUDA error: an illegal memory access was encountered",
        "CUDA illegal memory access", None),
}


def test_every_fixture_log_is_expected_and_was_a_real_failure():
    logs = {p.name for p in LOGS.iterdir() if p.name.endswith((".log", ".log.gz"))}
    assert logs == set(REAL)
    rcs = dict(re.findall(r"^(\S+) rc=(\d+)", (LOGS / "RC.txt").read_text(), re.M))
    for name in REAL:  # every process ended non-zero on the GPU machine
        assert int(rcs[name.split(".log")[0]]) != 0, name
    assert "NVIDIA H200" in (LOGS / "ENV.txt").read_text()


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_log(name):
    sig, phase, err, label, advice = REAL[name]
    lines = lines_of(name)
    t = triaged(name)  # read after the fact: no exit code, the log alone must say it
    assert t.failed and t.verdict == "failed", t.to_dict()
    assert (t.signature, t.failing_phase, t.label) == (sig, phase, label), t.to_dict()
    assert err in t.error_line and lines[t.error_lineno - 1].startswith(t.error_line[:400])
    before = lines[t.error_lineno - 2] if t.error_lineno > 1 else ""
    source_line = t.error_line.startswith("    ") and before.lstrip().startswith('File "')
    assert not source_line and not t.error_line.lstrip().startswith('File "'), "a frame is never the error line"
    if advice:
        assert advice in t.advice
    else:
        assert SIGNATURE_BY_ID[sig].known == "" or t.advice


def test_noisy_logs_name_the_end_not_the_recovered_retractions():
    for name in ("noisy-serving-watchdog.log.gz", "noisy-serving-illegal-address.log.gz"):
        lines = lines_of(name)
        assert len(lines) >= 20000
        retracts = sum("Decode out of memory happened" in ln or "Retract requests" in ln for ln in lines)
        t = triaged(name)
        note = next(n for n in t.notes if n["id"] == "decode-retract")
        assert note["count"] == retracts > 50 and t.signature != "oom" and "oom" not in t.also_seen
        assert t.error_lineno > 20000
    # the handled request error (a traceback, then the server answered 400 and went on) is seen, not the verdict
    t = triaged("noisy-serving-illegal-address.log.gz")
    assert "traceback" in t.also_seen and t.signature == "illegal-memory-access"


def test_the_noisy_logs_before_their_failure_are_healthy():
    """Cut just before the real failure, each noisy log (readiness, 20k lines of serving, hundreds
    of recovered retractions) is ok, not failed and not unverified."""
    for name in ("noisy-serving-watchdog.log.gz", "noisy-serving-illegal-address.log.gz"):
        lines = lines_of(name)
        end = triaged(name).error_lineno
        cut = next(i for i in range(end - 1, 0, -1) if "Decode batch" in lines[i - 1])
        t = triage_lines(lines[:cut])
        assert not t.failed and t.verdict == "ok", (name, t.to_dict())
        assert t.evidence.startswith("server reported ready") and t.notes[0]["id"] == "decode-retract"


def test_watchdog_is_named_not_torch_prose_about_network_errors():
    t = triaged("watchdog-timeout.log")
    assert "network errors" not in t.error_line and "nccl-error" in t.also_seen
    assert "unknown-crash" in t.also_seen  # the abort after it: a consequence, ranked below


def test_triage_cli_on_a_real_gzipped_log(tmp_path):
    log = tmp_path / "serve.log"
    log.write_text("\n".join(lines_of("noisy-serving-watchdog.log.gz")) + "\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, "-m", "forgepatch", "triage", str(log), "--json"], capture_output=True,
                       text=True, env=env, timeout=120)
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["verdict"] == "failed" and doc["signature"] == "nccl-watchdog-timeout"
    assert doc["known_issue"].startswith("PyTorch #118369")
    assert r.stderr.strip().startswith(f"forgepatch: error: {log}:{doc['error_lineno']}:")
    r = subprocess.run([sys.executable, "-m", "forgepatch", "triage", str(LOGS / "segfault.log")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and "process died: Segmentation fault [unknown-crash]" in r.stdout
    assert "warm-up sum 1024" in r.stdout  # the lines before the death are shown


# -- rules ------------------------------------------------------------------------------------
START = ["[t] server_args=ServerArgs(model_path='m')", "[t TP0] Load weight begin.", "[t TP0] Load weight end.",
         "[t TP0] KV Cache is allocated. #tokens: 1000", "[t TP0] Capture cuda graph begin.",
         "[t TP0] Capture cuda graph end.", "[t] The server is fired up and ready to roll!"]


@pytest.mark.parametrize("code, name", [(-11, "SIGSEGV"), (139, "SIGSEGV"), (134, "SIGABRT"), (137, "SIGKILL")])
def test_an_exit_code_of_a_signal_is_a_crash(code, name):
    t = triage_lines(START[:3] + ["loading shard 3 of 8"], exit_code=code)
    assert t.failed and t.signature == "unknown-crash" and t.label == f"process died: {name} (exit code {code})"
    assert t.error_line == "loading shard 3 of 8"


def test_a_server_stopped_on_purpose_is_not_a_crash():
    """SIGTERM is how a server is stopped: after readiness the log is ok, before it unverified."""
    stop = "bash: line 1:  4242 Terminated              python3 -m sglang.launch_server --model-path m"
    assert triage_lines(START + [stop]).verdict == "ok"
    assert triage_lines(START[:3] + [stop]).verdict == "unverified"


def test_a_plain_error_exit_is_still_an_exit_code():
    t = triage_lines(START[:3], exit_code=3)
    assert t.signature == "exit" and t.label == "exit code 3"


def test_the_wrapper_carries_its_inner_cause_and_its_source_line_is_not_the_error():
    lines = START[:5] + [
        "Traceback (most recent call last):",
        '  File "/sgl/cuda_graph_runner.py", line 400, in __init__',
        "    self.capture()",
        '  File "/sgl/cuda_graph_runner.py", line 510, in capture',
        "    raise ValueError('bad shape for bs=160')",
        "ValueError: bad shape for bs=160",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/sgl/cuda_graph_runner.py", line 402, in __init__',
        '    raise Exception(f"Capture cuda graph failed: {e}")',
        "Exception: Capture cuda graph failed: ValueError: bad shape for bs=160",
    ]
    t = triage_lines(lines)
    assert t.signature == "capture-failed" and t.failing_phase == "graph capture"
    assert t.label == "Capture cuda graph failed: ValueError: bad shape for bs=160"
    assert t.error_line.startswith("Exception: Capture cuda graph failed")
    # SGLang's own form puts the cause on the next line: the label still carries it
    t = triage_lines(START[:5] + ["Traceback (most recent call last):", '  File "/sgl/runner.py", line 9, in f',
                                  "    run()", "RuntimeError: not enough SMs for the kernel",
                                  "[t TP0] Capture cuda graph failed:"])
    assert t.label == "Capture cuda graph failed: RuntimeError: not enough SMs for the kernel"


def test_nccl_last_error_reason_is_in_the_label():
    t = triage_lines(START[:1] + [
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3135, unhandled system error",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
        "Last error:",
        "socketStartConnect: Connect to 10.0.0.2<43127> failed : Software caused connection abort",
    ])
    assert t.signature == "nccl-error"
    assert t.label == "NCCL error: socketStartConnect: Connect to 10.0.0.2<43127> failed : Software caused connection abort"
    # a launcher's per-rank prefix (torchrun's "[trainer0|0]:") does not hide it
    t = triage_lines(["[trainer0|0]:ncclInternalError: Internal check failed.", "[trainer0|0]:Last error:",
                      "[trainer0|0]:ncclSocketInit: connecting to address with family 59936 is neither AF_INET"])
    assert t.signature == "nccl-error" and t.label.startswith("NCCL error: [trainer0|0]:ncclSocketInit: connecting")


@pytest.mark.parametrize("line, sig", [
    ("CUDA error at kernels.cu:88 code=700(cudaErrorIllegalAddress) \"cudaDeviceSynchronize()\"", "illegal-memory-access"),
    ("CUDADriverError: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure", "launch-failure"),
    ("node0:12:34 [0] NCCL WARN Cuda failure 209 'no kernel image is available'", "no-kernel-image"),
    ("Warp CUDA error 904: capturing stream has unjoined work (in function wp_cuda_graph_end_capture)", "capture-unjoined"),
    ("terminate called after throwing an instance of 'std::runtime_error'", "unknown-crash"),
    ("E1202 torchrun: Signal 11 (SIGSEGV) received by PID 4242", "unknown-crash"),
])
def test_cuda_errors_and_deaths_in_their_usual_forms(line, sig):
    t = triage_lines(START[:2] + [line])
    assert t.failed and t.signature == sig, t.to_dict()


def test_an_unmapped_cuda_error_is_still_a_cuda_error_and_our_own_exit_line_is_not_one():
    t = triage_lines(START[:2] + ["CUDA error at a.cu:9 code=1(cudaErrorInvalidValue) \"cudaMemcpy(d, h, n)\""])
    assert t.signature == "cuda-error" and "cudaErrorInvalidValue, code 1" in t.label
    t = triage_lines(START + ["[forgepatch] exit code=2"])
    assert t.signature == "exit" and "oom" not in t.also_seen


def test_errors_before_a_scheduler_heartbeat_were_survived():
    lines = START + [
        "[t TP0] Error in request: invalid stop token",
        "Traceback (most recent call last):", '  File "/x.py", line 1, in f', "    g()", "ValueError: stop token",
        "[t TP0] Decode batch, #running-req: 3, #token: 900, token usage: 0.01, gen throughput (token/s): 80.1, ",
    ]
    t = triage_lines(lines)
    assert not t.failed and t.verdict == "ok" and t.recovered == ["traceback"]
    t = triage_lines(lines[:-1])  # the log ends at the error: it is the verdict
    assert t.failed and t.signature == "traceback" and t.failing_phase == "first request"


# -- properties -------------------------------------------------------------------------------
NOISE = st.sampled_from([
    "[2026-12-02 04:06:42 TP0] Decode batch, #running-req: 12, #token: 4410, token usage: 0.22, cuda graph: True, "
    "gen throughput (token/s): 1900.21, #queue-req: 0, ",
    "[2026-12-02 04:06:42 TP0] Prefill batch, #new-seq: 2, #new-token: 1200, #cached-token: 30, token usage: 0.30, "
    "#running-req: 14, #queue-req: 3, ",
    'INFO:     127.0.0.1:41234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    'INFO:     127.0.0.1:41235 - "GET /health HTTP/1.1" 200 OK',
    "[2026-12-02 04:06:42 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.7000 -> 0.7500",
    "[2026-12-02 04:06:42 TP0] Decode out of memory happened. #retracted_reqs: 2, #new_token_ratio: 0.8500 -> 0.7500",
    "WARNING Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs.",
    "[2026-12-02 04:06:42] INFO: no custom Exception handler configured",
    "",
])
DEATHS = st.sampled_from(
    [ln for name in ("segfault.log", "aborted.log", "killed.log") for ln in lines_of(name) if "bash: line" in ln]
    + ["Segmentation fault (core dumped)", "Aborted (core dumped)", "Killed", "Fatal Python error: Aborted",
       "terminate called without an active exception",
       lines_of("no-kernel-image-code209.log")[0], lines_of("ptx-isa-too-new.log")[0],
       "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorMisalignedAddress: misaligned address",
       "RuntimeError: CUDA error: an illegal memory access was encountered",
       "CUDA error: unspecified launch failure", "Search for `cudaErrorLaunchFailure' in the docs"]
    + [f"CUDA error at k.cu:1 code={e.number}({e.runtime}) \"launch\"" for e in CUDA_ERRORS])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=st.integers(0, len(START)), noise=st.lists(NOISE, max_size=40), death=DEATHS,
       tail=st.lists(st.sampled_from(["", "shutting down", "[t] Exception ignored in: <function X.__del__>"]),
                     max_size=2))
def test_a_log_ending_in_a_death_or_cuda_error_is_never_ok(prefix, noise, death, tail):
    t = triage_lines(START[:prefix] + noise + [death] + tail)
    assert t.failed and t.verdict == "failed", (death, t.to_dict())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(noise=st.lists(NOISE, max_size=60), handled=st.booleans())
def test_a_healthy_log_with_recovered_warnings_is_never_failed(noise, handled):
    beat = "[t TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.00, gen throughput (token/s): 9.0, "
    recovered = ["Traceback (most recent call last):", '  File "/x.py", line 1, in f', "    g()",
                 "ValueError: stop token", beat] if handled else []
    t = triage_lines(START + noise + recovered + noise[:3])
    assert not t.failed and t.verdict == "ok", t.to_dict()


def test_the_literal_pre_check_never_hides_a_match():
    """The pre-check may only skip regexes that cannot match: on every line of every real log
    (and lines made to contain each CUDA enum), a regex match implies the pre-check passed."""
    patterns = [s.pattern for s in SIGNATURES if s.id not in ("traceback", "exit")]
    pre = Prefilter(patterns)
    compiled = [re.compile(p) for p in patterns]
    lines = [ln for name in REAL for ln in lines_of(name)[-400:]]
    lines += [f"x {e.runtime} {e.driver}" for e in CUDA_ERRORS] + [f"Cuda failure {e.number} z" for e in CUDA_ERRORS]
    matched = 0
    for line in lines:
        can = pre.possible(line)
        for rx, ok in zip(compiled, can):
            if rx.search(line):
                matched += 1
                assert ok, (rx.pattern, line)
    assert matched > 100


def test_a_long_log_streams_in_bounded_memory(tmp_path):
    """Memory does not grow with the log: peak for 4x the lines stays within a small margin."""
    from forgepatch.smoke import service

    block = "\n".join(lines_of("noisy-serving-watchdog.log.gz")[8:2008]) + "\n"

    def peak(copies: int) -> int:
        log = tmp_path / f"long{copies}.log"
        with log.open("w") as f:
            f.write("\n".join(START) + "\n")
            for _ in range(copies):
                f.write(block)
            f.write("x" * (3 << 20) + "\n")  # a 3 MB line is cut, not held whole
            f.write("bash: line 1:  99 Segmentation fault      python3 serve.py\n")
        tracemalloc.start()
        t = service.triage(str(log))
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert t.signature == "unknown-crash" and t.lines == len(START) + 2000 * copies + 2
        return top

    small, large = peak(2), peak(8)
    assert large < small * 1.5 + (1 << 20), (small, large)
    assert large < 16 << 20
