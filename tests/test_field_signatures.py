"""Failure signatures posted in public issues on sm_103 / sm_120 / sm_121 (each row of inimage/signatures.py cites its source).

Each case is a log line written from the issue's text, placed in an SGLang start-up log the way
it arrives in the field: after the phase it interrupts, wrapped by the generic lines SGLang and
the launcher print around it (``Capture cuda graph failed``, a traceback, ``Received sigquit``).
The ranking rule must hold: the most telling line names the failure, the wrapper loses. The
verdict carries the issue and, where the issue gives one, the workaround.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forgepatch.combination.results import JobResult
from forgepatch.inimage.monitor import triage_lines
from forgepatch.inimage.signatures import SIGNATURES, advice
from forgepatch.smoke import report

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "fixtures" / "logs"  # real failures made on an H200 (docs/gpu-runs/triage-logs/)


def real(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()

START = [
    "[2026-11-30 10:00:00] server_args=ServerArgs(model_path='m', tp_size=8)",
    "[2026-11-30 10:00:05] Load weight begin. avail mem=170.00 GB",
    "[2026-11-30 10:00:40] Load weight end. type=Model, avail mem=120.00 GB",
    "[2026-11-30 10:00:41] KV Cache is allocated. #tokens: 900000",
]
CAPTURE = ["[2026-11-30 10:00:42] Capture cuda graph begin. This can take up to several minutes."]


def wrapped(line: str, exc: str = "RuntimeError") -> list[str]:
    """``line`` inside graph capture, as a traceback's message, then the generic wrappers."""
    return START + CAPTURE + [
        "Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 400, in capture',
        "    self.capture_one_batch_size(bs, forward)",
        f"{exc}: {line}" if exc else line,
        "[2026-11-30 10:00:50] Capture cuda graph failed: " + line,
        "[2026-11-30 10:00:51] Received sigquit from a child process. It usually means the child failed.",
    ]


# id -> (log lines, issue the verdict must name, workaround text it must carry or None, failing phase)
CASES = {
    "cuda-arch-unsupported": (
        wrapped("No supported CUDA architectures found for major versions [9, 10].", exc="RuntimeError"),
        "SGLang #15650", "--disable-flashinfer-allreduce-fusion", "graph capture"),
    "jit-old-cuda": (
        START + CAPTURE + [
            "RuntimeError: No supported CUDA architectures found for major versions [12].",
            "  SM 12.x requires CUDA >= 12.9",
            "[2026-11-30 10:00:50] Capture cuda graph failed: No supported CUDA architectures found for major versions [12].",
        ], "FlashInfer #2577", "CUDA_HOME", "graph capture"),
    "tllmgen-fmha-arch": (
        START + CAPTURE + wrapped("[TensorRT-LLM][ERROR] TllmGenFmhaRunner: Unsupported architecture")[len(START) + 1:],
        "SGLang #24633", "--attention-backend", "graph capture"),
    "trtllm-mha-sm100-only": (
        START[:1] + [
            "Traceback (most recent call last):",
            '  File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", line 900, in _handle_attention_backend',
            "    raise ValueError(",
            "ValueError: TRTLLM MHA backend is only supported on Blackwell GPUs (SM100). Please use a different backend.",
        ], "SGLang #9140", "--attention-backend", "initialisation"),
    "triton-ptxas-arch": (
        START + CAPTURE + [
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/triton/backends/nvidia/compiler.py", line 450, in make_cubin',
            "    raise PTXASError(error)",
            "triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error",
            "`ptxas` stderr:",
            "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'",
            "[2026-11-30 10:00:50] Capture cuda graph failed: PTXAS error: Internal Triton PTX codegen error",
        ], "Triton #8539", "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas", "graph capture"),
    "no-kernel-image": (
        wrapped("CUDA error: no kernel image is available for execution on the device"),
        "SGLang #7249", "forgepatch audit", "graph capture"),
    "deepgemm-arch": (
        START[:2] + [
            "RuntimeError: Assertion error (/sgl-workspace/DeepGEMM/csrc/jit_kernels/impls/../heuristics/../../utils/"
            "layout.hpp:48): Unknown recipe",
            "[2026-11-30 10:00:09] Received sigquit from a child process. It usually means the child failed.",
        ], "SGLang #25877", None, "weight loading"),
    "mnnvl-allreduce-fusion": (
        START + CAPTURE + [
            "RuntimeError: Error in function 'trtllm_mnnvl_allreduce_fusion' at /workspace/csrc/trtllm_mnnvl_allreduce.cu:120: "
            "TVM_FFI_ICHECK(status == cudaSuccess) failed",
            "CUDA error: an illegal memory access was encountered",
            "[2026-11-30 10:00:50] Capture cuda graph failed: CUDA error: an illegal memory access was encountered",
        ], "SGLang PR #29485", "--disable-flashinfer-allreduce-fusion", "graph capture"),
    "symm-mem-rendezvous-hang": (
        START + CAPTURE + [
            "Thread 0x7f3a (most recent call first):",
            '  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/_symmetric_memory/__init__.py", '
            "line 1820 in rendezvous",
            "[2026-11-30 10:10:42] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        ], "SGLang #29073", "--enforce-disable-flashinfer-allreduce-fusion", "graph capture"),
    "nvls-multicast-oom": (
        START + [
            "node0:1234:1300 [3] transport/nvls.cc:185 NCCL WARN Failed to bind NVLink SHARP (NVLS) Multicast memory of "
            "size 1073741824 : CUDA error 2 'out of memory'",
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3690, unhandled cuda error",
        ], "NCCL #2077", "NCCL_NVLS_ENABLE=0", "CUDA graph setup"),
    "nvls-cuda-failure": (
        START + [
            "node0:1234:1300 [3] transport/nvls.cc:331 NCCL WARN Cuda failure 401 'the operation cannot be performed "
            "in the present state'",
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3690, unhandled cuda error",
        ], "NCCL #1788", "NCCL_ALGO=^NVLS", "CUDA graph setup"),
    "cublas-gemm-execution-failed": (
        wrapped("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
                "`cublasGemmStridedBatchedEx(handle, opa, opb, m, n, k, &alpha, a, CUDA_R_16BF, lda, stridea, b)`"),
        "SGLang #31740", "--disable-cuda-graph", "graph capture"),
    "batch-prefill-buffer-overflow": (
        wrapped("Buffer overflow when allocating memory for batch_prefill_tmp_v with size 1073741824 and alignment 16"),
        "vLLM #40023", None, "graph capture"),
    "custom-allreduce-illegal-access": (
        START + CAPTURE + [
            "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:368 'an illegal memory access was encountered'",
            "[2026-11-30 10:00:50] Capture cuda graph failed: CUDA error: an illegal memory access was encountered",
        ], "vLLM #52457", "--disable-custom-all-reduce", "graph capture"),
    "driver-xid": (
        START + CAPTURE + [
            "[Mon Nov 30 10:00:48 2026] NVRM: Xid (PCI:0000:1b:00): 119, pid=1234, name=python3, Timeout after 6s of "
            "waiting for RPC response from GPU4 GSP!",
            "CUDA error: an illegal memory access was encountered",
            "[2026-11-30 10:00:50] Capture cuda graph failed: CUDA error: an illegal memory access was encountered",
        ], "open-gpu-kernel-modules #1159", None, "graph capture"),
    "module-not-found": (
        [
            "Traceback (most recent call last):",
            '  File "<frozen runpy>", line 189, in _run_module_as_main',
            '  File "<frozen runpy>", line 112, in _get_module_details',
            '  File "/opt/conda/lib/python3.12/site-packages/sglang/__init__.py", line 5, in <module>',
            "    from sglang.lang.api import (",
            "ModuleNotFoundError: No module named 'pybase64'",
        ], "SGLang #13276", "install the missing package", "start-up"),
    # issue 24: classes from real logs (each fault in its own process on an H200, output unedited)
    "nccl-watchdog-timeout": (real("watchdog-timeout.log"), "PyTorch #118369", "did not reach the collective",
                              "start-up"),
    "nccl-duplicate-gpu": (real("duplicate-gpu.log"), "Megatron-LM #661", "torch.cuda.set_device(local_rank)",
                           "start-up"),
    "nccl-no-socket": (real("nccl-no-socket-interface.log"), "NCCL #1837", "NCCL_SOCKET_IFNAME", "start-up"),
    "ptx-too-new": (real("ptx-isa-too-new.log"), "FasterTransformer #551", "driver", "start-up"),
    "ptx-invalid": (real("ptx-arch-too-new.log"), "SGLang #7249", "virtual arch", "start-up"),
    "triton-shared-memory": (real("triton-shared-memory.log"), "SGLang #28019", "num_stages", "start-up"),
    "cublas-invalid-value": (real("cublas-invalid-value.log"), "CTranslate2 #1490", "leading dimensions",
                             "start-up"),
    "capture-unsupported": (real("capture-sync.log"), "PyTorch #87794", "warm-up", "graph capture"),
    "capture-unjoined": (real("capture-unjoined.log"), "DeepEP #62", "wait_stream", "graph capture"),
    "capture-cpu-copy": (real("capture-cpu-copy.log"), "PyTorch PR #172156", "pin_memory=True", "graph capture"),
    # written from the issues' text: the consequence alone, and a stream-boundary rule
    "capture-invalidated": (
        ["Traceback (most recent call last):",
         '  File "/x/graphs.py", line 126, in capture_end',
         "    super().capture_end()",
         "torch.AcceleratorError: CUDA error: operation failed due to a previous error during capture",
         "Search for `cudaErrorStreamCaptureInvalidated' in https://docs.nvidia.com/cuda/ for more information."],
        "mujoco_warp #425", "first error", "graph capture"),
    "capture-rule": (
        ["Warp CUDA error 906: operation would make the legacy stream depend on a capturing blocking stream "
         "(in function cuda_context_set_stream, warp.cu:2151)"],
        "warp #653", "join every fork", "graph capture"),
}


def test_every_field_signature_has_a_case_and_a_source():
    field = {s.id for s in SIGNATURES if s.known and not s.note}
    assert field <= set(CASES), f"untested field signatures: {sorted(field - set(CASES))}"
    for s in SIGNATURES:
        if s.workaround:
            assert s.known, f"{s.id}: a workaround without the issue it comes from"


@pytest.mark.parametrize("sig_id", sorted(CASES))
def test_field_signature_wins_over_its_wrappers(sig_id):
    lines, issue, workaround, phase = CASES[sig_id]
    t = triage_lines(lines, exit_code=1)
    assert t.failed
    assert t.signature == sig_id, (t.signature, t.label, t.also_seen)
    assert t.failing_phase == phase
    doc = t.to_dict()
    assert issue in doc["known_issue"] and issue in t.advice
    if workaround:
        assert workaround in doc["workaround"] and "workaround: " in t.advice
    else:
        assert doc["workaround"] is None and "workaround" not in t.advice
    # the line that carries it, not a wrapper, is the error line
    assert t.error_line is not None and "Capture cuda graph failed" not in t.error_line
    assert "sigquit" not in t.error_line


def test_cublas_statuses_that_no_issue_reports_get_no_advice():
    """A CUBLAS status outside the field reports (a capture without warm-up) must not be
    labelled with the B300 issue: the generic signature, no known issue."""
    lines = START + CAPTURE + [
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
        "[2026-11-30 10:00:50] Capture cuda graph failed: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED",
    ]
    t = triage_lines(lines, exit_code=1)
    assert t.signature == "cublas" and t.label == "CUBLAS_STATUS_NOT_INITIALIZED"
    assert t.advice == "" and t.to_dict()["known_issue"] is None


def test_the_seed_failure_names_its_issue_but_not_the_other_majors_one():
    t = triage_lines(CASES["cuda-arch-unsupported"][0], exit_code=1)
    assert t.label == "No supported CUDA architectures found for major versions [9, 10]"
    assert "SGLang #15650" in t.advice


NOTES = {
    "symm-mem-capability": ("WARNING SymmMemCommunicator: Device capability 10.3 not supported, communicator is not "
                            "available.", "vLLM #30630"),
    "custom-allreduce-pcie-off": ("WARNING Custom allreduce is disabled because it's not supported on more than two "
                                  "PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True "
                                  "explicitly.", "vLLM #31936"),
    "nvfp4-not-built": ("-- Not building NVFP4 as no compatible archs were found.", "vLLM PR #43573"),
}


@pytest.mark.parametrize("note_id", sorted(NOTES))
def test_notes_are_reported_and_never_the_verdict(note_id):
    line, issue = NOTES[note_id]
    ok = START + [line] + CAPTURE + [
        "[2026-11-30 10:00:45] Capture cuda graph end. Time elapsed: 3.1 s",
        "[2026-11-30 10:00:46] The server is fired up and ready to roll!",
    ]
    t = triage_lines(ok, exit_code=0)
    assert not t.failed and t.signature is None
    assert [n["id"] for n in t.notes] == [note_id] and issue in t.notes[0]["advice"]
    # beside a real failure, the failure decides
    bad = START + [line] + CASES["cublas-gemm-execution-failed"][0][len(START):]
    t = triage_lines(bad, exit_code=1)
    assert t.signature == "cublas-gemm-execution-failed" and [n["id"] for n in t.notes] == [note_id]


def _result(job_id: str, lines: list[str], code: int) -> JobResult:
    t = triage_lines(lines, exit_code=code)
    return JobResult(id=job_id, arch="sm103", pin="v0.5.23", profile=job_id, status="fail" if t.failed else "pass",
                     summary=t.summary, signature=t.signature, label=t.label, failing_phase=t.failing_phase,
                     notes=t.notes)


def test_reports_print_known_issue_workaround_and_notes():
    failing = _result("ep8", START + [NOTES["symm-mem-capability"][0]] + CASES["cublas-gemm-execution-failed"][0][len(START):], 1)
    passing = _result("tp8", START + CAPTURE + ["Capture cuda graph end.", "The server is fired up and ready to roll!"], 0)
    md = report.to_markdown([failing, passing])
    assert "Known issues:" in md
    assert "- ep8: known issue: SGLang #31740, #19081 (B300); workaround: on sm103 with EP > 1" in md
    assert "Notes (warnings in the logs):" in md and "capability 10.3 not supported" in md and ": ep8" in md
    assert "tp8:" not in md.split("Known issues:")[1]
    junit = report.to_junit([failing, passing])
    assert "known issue: SGLang #31740" in junit and "note: symmetric-memory all-reduce off" in junit
    # the JSON document keeps the notes (results files carry them to release and merge)
    assert JobResult.model_validate(json.loads(failing.model_dump_json())).notes == failing.notes


def test_triage_cli_prints_the_field_knowledge(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join(CASES["triton-ptxas-arch"][0] + [NOTES["custom-allreduce-pcie-off"][0]]) + "\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, "-m", "forgepatch", "triage", str(log)], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "signature:     Triton's ptxas does not know sm_121a [triton-ptxas-arch]" in r.stdout
    assert "known issue:   Triton #8539" in r.stdout
    assert "workaround:    TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas" in r.stdout
    assert "note:          line" in r.stdout and "custom all-reduce off" in r.stdout
    assert "Triton #8539" in r.stderr.strip().splitlines()[-1]
    r = subprocess.run([sys.executable, "-m", "forgepatch", "triage", str(log), "--json"], capture_output=True,
                       text=True, env=env, timeout=60)
    doc = json.loads(r.stdout)
    assert doc["known_issue"] == "Triton #8539" and doc["notes"][0]["id"] == "custom-allreduce-pcie-off"


def test_advice_of_unknown_or_missing_ids_is_empty():
    assert advice(None) == "" and advice("no-such-signature") == ""


def test_sglang_not_importable_is_named_not_an_exit_code(tmp_path):
    """What `python3 -m sglang.launch_server` really prints where no sglang is importable (the
    local runner's old failure, reported as `exit code 1 in start-up`): the table names it."""
    proc = subprocess.run([sys.executable, "-I", "-m", "sglang.launch_server", "--model-path", "m"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    if proc.returncode == 0 or "No module named 'sglang'" not in proc.stderr:
        pytest.skip("sglang is importable by this interpreter")
    lines = ["[forgepatch-server] launching python3 -m sglang.launch_server"] + proc.stderr.splitlines()
    t = triage_lines(lines, exit_code=proc.returncode)
    assert t.failed and t.signature == "module-not-found" and t.label == "No module named 'sglang'"
    assert t.failing_phase == "start-up" and "No module named 'sglang'" in t.error_line
    assert "install the missing package" in t.advice
    res = _result("tp1", lines, proc.returncode)
    assert report.cell(res) == "**FAIL**: No module named 'sglang' in start-up"
