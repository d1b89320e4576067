"""Real failures for `forgepatch triage` fixtures, one per process: `python3 triage_faults.py NAME`.

Run by make-triage-logs.sh beside this file (which names every fault); each writes what the
real library prints, unedited. The two `noisy-*` faults print >= 20k lines of serving-like
output in SGLang's own log formats (read from the 0.5.2 and 0.5.23 wheels: scheduler
``Prefill batch``/``Decode batch`` lines, ``KV cache pool is full. Retract requests.``, the
start-up milestones) from a real torch process doing real GPU work between lines, with
recovered warnings, and end in a real failure of that same process.
"""

from __future__ import annotations

import ctypes
import datetime
import logging
import os
import random
import sys
import time


def _torch():
    import torch

    assert torch.cuda.is_available()
    torch.cuda.init()
    return torch


# -- process deaths without a Python traceback --------------------------------------------------
def segv() -> None:
    torch = _torch()
    x = torch.ones(1024, device="cuda")
    print(f"warm-up sum {x.sum().item():.0f}", flush=True)
    ctypes.string_at(0)  # SIGSEGV in the interpreter: no traceback, the shell reports it


def segv_faulthandler() -> None:
    import faulthandler

    faulthandler.enable()
    segv()


def abort() -> None:
    torch = _torch()
    print(f"device {torch.cuda.get_device_name()}", flush=True)
    os.abort()


def killed() -> None:
    _torch()
    print("about to be killed", flush=True)
    os.kill(os.getpid(), 9)


# -- NCCL ---------------------------------------------------------------------------------------
def _pg(rank: int = 0, world: int = 1, timeout_s: float = 600, port: int = 29511):
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    torch = _torch()
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s),
                            device_id=torch.device("cuda", 0))
    return torch, dist


def watchdog() -> None:
    """A 1-rank NCCL group whose stream is held by a long kernel: the all-reduce never starts."""
    torch, dist = _pg(timeout_s=8)
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print(f"all_reduce ok: {x[0].item():.0f}", flush=True)
    torch.cuda._sleep(int(1.98e9 * 120))  # ~2 minutes of GPU time ahead of the collective
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print("unreachable", flush=True)


def _dup_rank(rank: int) -> None:
    torch, dist = _pg(rank=rank, world=2, port=29512)
    x = torch.ones(16, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print(f"rank {rank}: {x[0].item()}", flush=True)


def duplicate_gpu() -> None:
    """Two ranks on one GPU (torch.multiprocessing, like a launcher with a bad device map)."""
    import torch.multiprocessing as mp

    mp.spawn(_dup_rank, nprocs=2, join=True)


def no_socket_if() -> None:
    """NCCL_SOCKET_IFNAME names no interface (set by the script)."""
    torch, dist = _pg(port=29513)
    x = torch.ones(16, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print("unreachable", flush=True)


# -- kernels ------------------------------------------------------------------------------------
def triton_smem() -> None:
    """A Triton kernel whose tiles need more shared memory than the GPU has (a config tuned for
    a bigger part)."""
    import triton
    import triton.language as tl

    torch = _torch()

    @triton.jit
    def mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc)

    M = N = K = 1024
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float32)
    mm[(M // 256, N // 256)](a, b, c, M, N, K, BM=256, BN=256, BK=256, num_stages=4)
    torch.cuda.synchronize()


def cublas_invalid() -> None:
    """cuBLAS called with a leading dimension smaller than the matrix (cupy's raw binding)."""
    import cupy
    from cupy_backends.cuda.libs import cublas

    a = cupy.ones((64, 64), dtype=cupy.float32)
    c = cupy.zeros((64, 64), dtype=cupy.float32)
    one = numpy_float(1.0)
    zero = numpy_float(0.0)
    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    cublas.sgemm(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, 64, 64, 64,
                 one.ctypes.data, a.data.ptr, 1, a.data.ptr, 64, zero.ctypes.data, c.data.ptr, 64)
    cupy.cuda.runtime.deviceSynchronize()


def numpy_float(v: float):
    import numpy

    return numpy.array(v, dtype=numpy.float32)


def misaligned() -> None:
    import cupy

    k = cupy.RawKernel(r'''
extern "C" __global__ void rd(const char *p, float *out) { out[0] = *(const double *)(p + 1); }
''', "rd")
    buf = cupy.zeros(64, dtype=cupy.uint8)
    out = cupy.zeros(1, dtype=cupy.float32)
    k((1,), (1,), (buf, out))
    cupy.cuda.runtime.deviceSynchronize()


def ptx_too_new() -> None:
    """PTX whose ISA version is newer than the driver's JIT knows (what a toolkit newer than the
    driver emits): cupy loads it through cuModuleLoadData."""
    import cupy

    path = os.environ["PTX_FILE"]
    with open(path, "rb") as f:
        data = f.read()
    print(f"loading {path}: " + data.split(b"\n.version", 1)[1].split(b"\n", 1)[0].decode().strip(), flush=True)
    mod = cupy.cuda.function.Module()
    mod.load(data)
    print("loaded", flush=True)


# -- CUDA graph capture rules (bare torch scripts, no SGLang phase markers) ---------------------
def _capture(body) -> None:
    torch = _torch()
    x = torch.ones(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = x * 2  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    print("capturing", flush=True)
    with torch.cuda.graph(g):
        body(torch, x)
    g.replay()
    torch.cuda.synchronize()
    print("replayed", flush=True)
    del y


def capture_sync() -> None:
    _capture(lambda torch, x: (x.mul_(2), torch.cuda.synchronize()))


def capture_unjoined() -> None:
    def body(torch, x):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            x.add_(1)  # forked onto a side stream and never joined back

    _capture(body)


def capture_cpu_copy() -> None:
    _capture(lambda torch, x: x.copy_(torch.ones(1024)))


def capture_wrapped() -> None:
    """SGLang's cuda_graph_runner pattern: the capture error re-raised inside a wrapper message."""
    msg = ("Possible solutions:\n"
           "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
           "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
           "3. disable torch compile by not using --enable-torch-compile\n"
           "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
           "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n")
    try:
        capture_sync()
    except RuntimeError as e:
        raise Exception(f"Capture cuda graph failed: {e}\n{msg}")


# -- long noisy serving logs -------------------------------------------------------------------
def _serving(n_lines: int, seed: int):
    """Print serving-like output (SGLang formats) with recovered warnings; return the torch module
    and a logger for the caller's real failure."""
    torch = _torch()
    rnd = random.Random(seed)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s TP0] %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S", stream=sys.stdout, force=True)
    log = logging.getLogger("sglang.srt.managers.scheduler")
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    log.info("server_args=ServerArgs(model_path='synthetic/noise', tp_size=1, mem_fraction_static=0.88, "
             "cuda_graph_max_bs=160, random_seed=%d)", seed)
    log.info("Load weight begin. avail mem=%.2f GB", torch.cuda.mem_get_info()[0] / 2**30)
    log.info("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB.",
             torch.cuda.mem_get_info()[0] / 2**30, w.numel() * 2 / 2**30)
    log.info("KV Cache is allocated. #tokens: 912384, K size: 27.84 GB, V size: 27.84 GB")
    log.info("Memory pool end. avail mem=%.2f GB", torch.cuda.mem_get_info()[0] / 2**30)
    log.info("Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB",
             torch.cuda.mem_get_info()[0] / 2**30)
    log.info("Capture cuda graph end. Time elapsed: 9.41 s. mem usage=0.61 GB. avail mem=%.2f GB.",
             torch.cuda.mem_get_info()[0] / 2**30)
    log.info("The server is fired up and ready to roll!")
    running, ratio, t0 = 0, 0.7, time.perf_counter()
    for i in range(n_lines):
        r = rnd.random()
        x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16) @ w  # real work between lines
        if i % 97 == 0:
            torch.cuda.synchronize()
        if r < 0.18:
            new = rnd.randint(1, 8)
            running += new
            log.info("Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, "
                     "#running-req: %d, #queue-req: %d, ", new, new * rnd.randint(200, 900), rnd.randint(0, 4000),
                     rnd.random(), running, rnd.randint(0, 40))
        elif r < 0.80:
            running = max(0, running - rnd.randint(0, 2))
            dt = time.perf_counter() - t0
            log.info("Decode batch, #running-req: %d, #token: %d, token usage: %.2f, cuda graph: %s, "
                     "gen throughput (token/s): %.2f, #queue-req: %d, ", running, rnd.randint(1000, 800000),
                     rnd.random(), rnd.random() < 0.9, 40 * running / max(dt, 1e-3) + 1, rnd.randint(0, 40))
        elif r < 0.97:
            print(f'INFO:     127.0.0.1:{rnd.randint(30000, 60000)} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
                  flush=True)
        elif r < 0.985:
            old, ratio = ratio, min(1.0, ratio + 0.05)
            log.warning("KV cache pool is full. Retract requests. #retracted_reqs: %d, #new_token_ratio: %.4f -> %.4f",
                        rnd.randint(1, 6), old, ratio)
        elif r < 0.995:
            old, ratio = ratio, max(0.1, ratio - 0.1)
            log.warning("Decode out of memory happened. #retracted_reqs: %d, #new_token_ratio: %.4f -> %.4f",
                        rnd.randint(1, 6), old, ratio)
        else:
            print(f'INFO:     127.0.0.1:{rnd.randint(30000, 60000)} - "GET /health HTTP/1.1" 200 OK', flush=True)
        del x
        sys.stdout.flush()
    return torch, log


def noisy_watchdog() -> None:
    """Long serving output, then the NCCL watchdog kills the process (a kernel holds the stream)."""
    torch, dist = _pg(timeout_s=8, port=29514)
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    _serving(21000, seed=24)
    torch.cuda._sleep(int(1.98e9 * 120))
    dist.all_reduce(x)
    torch.cuda.synchronize()


def noisy_illegal() -> None:
    """Long serving output with a handled request error, then a kernel writes where it must not."""
    import cupy

    torch, log = _serving(20500, seed=2024)
    try:
        torch.empty(4, device="cuda").view(3)
    except RuntimeError:
        log.exception("Error in request (the server answered 400 and went on)")
    print('INFO:     127.0.0.1:40404 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request', flush=True)
    bad = cupy.RawKernel(r'''
extern "C" __global__ void wr(unsigned long long a) { *(float *)(a + 4 * threadIdx.x) = 1.0f; }
''', "wr")
    bad((1,), (32,), (cupy.uint64(0x100),))  # an address nothing maps
    y = torch.randn(8, device="cuda")
    print(float(y.sum()), flush=True)


FAULTS = {name.replace("_", "-"): fn for name, fn in list(globals().items())
          if callable(fn) and not name.startswith("_") and fn.__module__ == __name__
          and name not in ("numpy_float",)}

if __name__ == "__main__":
    FAULTS[sys.argv[1]]()
