#!/usr/bin/env python3
"""TEST DOUBLE — a stand-in for ``python -m sglang.launch_server``; not SGLang.

CI has no GPU, so the SGLang server tier is tested against this process. It takes the same
command line (``--model-path M --host H --port P`` plus any flags), writes a start-up log in
SGLang's format with SGLang's real markers, spawns a long-lived child (as SGLang's scheduler
processes are), and serves ``/health``, ``/health_generate`` and ``/v1/chat/completions`` on
``--host``. It can be told to fail in each shape the smoke monitor must recognise:

  FAKE_SGLANG_FAIL=<shape>   (or ``--fake-fail <shape>``) one of:
     cublas  illegal-memory  nccl  oom  cuda-arch  sigquit  traceback  hang  watchdog
     exit  generation
  FAKE_SGLANG_FAIL_IF="--ep-size 8;--enable-nccl-nvls"  fail (with FAKE_SGLANG_FAIL's shape,
     default cublas) only if ALL these flag groups are on the command line — the bisection tests
  FAKE_SGLANG_LAUNCH_LOG=<file>  append one line per launch (the flags it got): launch counting
  FAKE_SGLANG_STEP=<seconds>     pause between log phases (default 0.02)
  FAKE_SGLANG_STUBBORN_CHILD=1   the child ignores SIGTERM (so only SIGKILL stops it)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SHAPES = ("cublas", "illegal-memory", "nccl", "oom", "cuda-arch", "sigquit", "traceback", "hang",
          "watchdog", "exit", "generation")

CUBLAS = ("CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmStridedBatchedEx( handle, opa, opb, m, n, k, "
          "&alpha, a, CUDA_R_16BF, lda, stridea, b, CUDA_R_16BF, ldb, strideb, &beta, c, CUDA_R_16BF, ldc, "
          "stridec, num_batches, compute_type, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`")
CAPTURE_HINT = ("Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n3. disable torch compile by not using "
                "--enable-torch-compile\n4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge "
                "performance loss)\nOpen an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose")


def log(msg: str, rank: int | None = 0) -> None:
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    who = f" TP{rank}" if rank is not None else ""
    print(f"[{stamp}{who}] {msg}", flush=True)


def raw(text: str) -> None:
    print(text, flush=True)


def traceback_block(frames: list[tuple[str, str]], exc: str, rank: int = 0, header: str = "Scheduler hit an exception: ") -> None:
    log(header + "Traceback (most recent call last):", rank)
    for where, code in frames:
        raw(f'  File "{where}')
        raw(f"    {code}")
    raw(exc)


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    flags: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok in ("--model-path", "--host", "--port", "--fake-fail"):
            opts[tok[2:]] = argv[i + 1]
            i += 2
            continue
        flags.append(tok)
        i += 1
    return opts, flags


def groups_present(flags: list[str], groups: list[str]) -> bool:
    joined = " " + " ".join(flags) + " "
    return all(f" {g.strip()} " in joined for g in groups if g.strip())


class Handler(BaseHTTPRequestHandler):
    shape: str | None = None
    ready = threading.Event()

    def log_message(self, fmt: str, *args) -> None:  # uvicorn-style access log
        log(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" {args[1]} OK', None)

    def _send(self, code: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200 if self.ready.is_set() else 503, {})
        elif self.path == "/health_generate":
            if self.shape == "generation":
                self._send(503, {"error": "generation failed"})
            else:
                self._send(200, {})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/chat/completions":
            self._send(404, {"detail": "Not Found"})
            return
        if self.shape == "generation":
            log("Error in request: RuntimeError: CUDA error: an illegal memory access was encountered", None)
            self._send(500, {"object": "error", "message": "Internal server error", "type": "InternalServerError", "code": 500})
            return
        self._send(200, {
            "id": "fake-0", "object": "chat.completion", "created": int(time.time()), "model": req.get("model", "default"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello from the test double."},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
        })


def spawn_child(stubborn: bool) -> subprocess.Popen:
    code = "import signal,time\n"
    if stubborn:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "time.sleep(3600)\n"
    # the name carries the test run's id, so a stray check never sees another run's children
    name = "fake-sglang-scheduler-" + os.environ.get("FORGEPATCH_TEST_RUN", "solo")
    return subprocess.Popen([sys.executable, "-c", code, name])


CHILDREN: list[subprocess.Popen] = []


def die_by_sigquit() -> None:
    """What SGLang's launcher does when a child fails: log, then kill its process tree."""
    log("Received sigquit from a child process. It usually means the child failed.", None)
    for child in CHILDREN:
        child.kill()
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    opts, flags = parse(argv)
    shape = opts.get("fake-fail") or os.environ.get("FAKE_SGLANG_FAIL") or None
    fail_if = os.environ.get("FAKE_SGLANG_FAIL_IF")
    if fail_if is not None:
        shape = (shape or "cublas") if groups_present(flags, fail_if.split(";")) else None
    if shape and shape not in SHAPES:
        print(f"fake_sglang_server: unknown failure shape {shape!r}", file=sys.stderr)
        return 2
    if launches := os.environ.get("FAKE_SGLANG_LAUNCH_LOG"):
        with open(launches, "a") as fh:
            fh.write(json.dumps(flags) + "\n")
    step = float(os.environ.get("FAKE_SGLANG_STEP", "0.02"))
    port = int(opts.get("port", "30000"))
    host = opts.get("host", "127.0.0.1")
    signal.signal(signal.SIGTERM, lambda *_: (log("Shutting down (SIGTERM)", None), os._exit(0)))

    tp = 1
    if "--tp-size" in flags:
        tp = int(flags[flags.index("--tp-size") + 1])
    log("INFO: benign notice: no custom Exception handler configured; using the default.", None)
    log(f"server_args=ServerArgs(model_path='{opts.get('model-path')}', tp_size={tp}, host='{host}', port={port}, "
        f"extra={flags!r})", None)
    child = spawn_child(bool(os.environ.get("FAKE_SGLANG_STUBBORN_CHILD")))
    CHILDREN.append(child)
    time.sleep(step)
    log("Init torch distributed begin.")
    if shape == "nccl":
        traceback_block([("/sgl/python/sglang/srt/model_executor/model_runner.py\", line 412, in init_torch_distributed",
                          "initialize_model_parallel(tensor_model_parallel_size=self.tp_size)")],
                        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
                        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.28.9", rank=1)
        raw("ncclUnhandledCudaError: Call to CUDA function failed.")
        die_by_sigquit()
    log("Init torch distributed ends. mem usage=0.00 GB")
    log("Load weight begin. avail mem=139.10 GB")
    time.sleep(step)
    if shape == "oom":
        traceback_block([("/sgl/python/sglang/srt/model_loader/loader.py\", line 380, in load_model", "model = _initialize_model(...)")],
                        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                        "139.81 GiB of which 1.02 GiB is free.")
        die_by_sigquit()
    if shape == "exit":
        child.kill()
        return 3
    if shape == "traceback":
        log("Ignoring exception in optional telemetry hook (benign): Exception raised and handled", None)
        traceback_block([("/sgl/python/sglang/srt/models/qwen3_moe.py\", line 88, in __init__", "self.experts = get_moe_impl_class()(...)")],
                        "KeyError: 'moe_runner'")
        raw("")
        raw("During handling of the above exception, another exception occurred:")
        raw("")
        traceback_block([("/sgl/python/sglang/srt/model_executor/model_runner.py\", line 301, in load_model", "self.model = get_model(...)")],
                        "ValueError: Unsupported MoE runner backend for this model", header="")
        raw("[2099-01-01 00:00:00] shutting down the scheduler; see above")
        die_by_sigquit()
    log("Load weight end. type=Qwen3MoeForCausalLM, dtype=torch.bfloat16, avail mem=120.00 GB, mem usage=19.10 GB.")
    log("KV Cache is allocated. #tokens: 500000, K size: 20.00 GB, V size: 20.00 GB")
    log("Memory pool end. avail mem=60.00 GB")
    log("Capture cuda graph begin. This can take up to several minutes. avail mem=60.00 GB")
    raw("Capturing batches (bs=512 avail_mem=59.90 GB):   0%|          | 0/36 [00:00<?, ?it/s]")
    time.sleep(step)
    frames = [("/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py\", line 390, in __init__", "self.capture()"),
              ("/sgl/python/sglang/srt/layers/moe/ep_moe/layer.py\", line 211, in forward", "out = torch.bmm(a, b)")]
    if shape == "cublas":
        traceback_block(frames, f"RuntimeError: CUDA error: {CUBLAS}", rank=3)
        raw("")
        raw("During handling of the above exception, another exception occurred:")
        raw("")
        traceback_block(frames[:1], f"Exception: Capture cuda graph failed: {CUBLAS}", rank=3, header="")
        raw(CAPTURE_HINT)
        die_by_sigquit()
    if shape == "illegal-memory":
        traceback_block(frames, "RuntimeError: CUDA error: an illegal memory access was encountered", rank=2)
        raw("CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.")
        raw("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
        die_by_sigquit()
    if shape == "cuda-arch":
        traceback_block(frames + [("/usr/local/lib/python3.12/dist-packages/flashinfer/jit/core.py\", line 120, in check_cuda_arch",
                                   "raise RuntimeError(...)")],
                        "RuntimeError: No supported CUDA architectures found for major versions [9, 10].")
        raw("")
        raw("During handling of the above exception, another exception occurred:")
        raw("")
        traceback_block(frames[:1], "Exception: Capture cuda graph failed: No supported CUDA architectures found for major versions [9, 10].",
                        header="")
        raw(CAPTURE_HINT)
        die_by_sigquit()
    if shape == "sigquit":
        die_by_sigquit()
    if shape == "hang":
        while True:  # stuck in capture: no more output
            time.sleep(1)
    log("Capture cuda graph end. Time elapsed: 4.02 s. mem usage=0.98 GB. avail mem=58.92 GB.")
    log("max_total_num_tokens=500000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048")

    Handler.shape = shape
    httpd = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    log(f"INFO:     Started server process [{os.getpid()}]", None)
    log("INFO:     Application startup complete.", None)
    log(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)", None)
    Handler.ready.set()
    log("Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0")
    log("The server is fired up and ready to roll!", None)
    if shape == "watchdog":
        time.sleep(step * 5)
        log("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)")
        die_by_sigquit()
    try:
        while True:
            time.sleep(1)
    finally:
        child.kill()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
