"""The probe's GPU checks. torch is imported inside the functions, so importing this module
(e.g. by a spawned rank process before it starts) costs nothing.

Each in-process check takes a ``PhaseTracker`` and returns ``{"ok", "max_error", "tolerance",
"metrics", "detail"}``; the all-reduce rank function takes ``(rank, world, params, reporter)``
and returns the same per rank. Shapes are small: the probe tests that graph capture works and
gives the eager result, not throughput.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from forgepatch.inimage.probe_result import BF16_VS_EAGER, BF16_VS_FP32, EXACT, Tolerance

# The GPU machines share NVLink hosts; multicast (NVLS) must stay off (docs/architecture.md, Facts).
NCCL_SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def _close(torch: Any, out: Any, ref: Any, tol: Tolerance) -> tuple[bool, float]:
    """(every element within ``tol`` and finite, max absolute error) — Tolerance.allows, vectorised."""
    out32, ref32 = out.float(), ref.float()
    diff = (out32 - ref32).abs()
    within = diff <= tol.atol + tol.rtol * ref32.abs()  # NaN compares False
    ok = bool(within.all().item()) and out.shape == ref.shape
    return ok, float(diff.max().item())


def _eager(torch: Any, step: Any, tracker: Any) -> tuple[Any, float]:
    """Run ``step`` once eagerly (the reference the graph must match); returns (outputs, ms)."""
    tracker.phase("eager")
    t0 = time.perf_counter()
    out = step()
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


def _capture_and_replay(torch: Any, step: Callable[[], Any], replays: int, tracker: Any,
                        before_replay: Callable[[], None] | None = None) -> tuple[Any, Any, dict]:
    """Warm ``step`` up on a side stream, capture it into a CUDA graph, replay it ``replays``
    times (after ``before_replay``, e.g. a barrier that lines ranks up so one rank's replay time
    does not include waiting for a late peer). Returns (graph, static outputs, timing metrics)."""
    tracker.phase("warmup")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    tracker.phase("capture")
    graph = torch.cuda.CUDAGraph()
    t0 = time.perf_counter()
    with torch.cuda.graph(graph):
        outputs = step()
    torch.cuda.synchronize()
    capture_s = time.perf_counter() - t0

    tracker.phase("replay")
    if before_replay is not None:
        before_replay()
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    replay_s = (time.perf_counter() - t0) / max(replays, 1)
    return graph, outputs, {"capture_ms": capture_s * 1e3, "replay_us": replay_s * 1e6}


def _compare_all(torch: Any, pairs: list[tuple[str, Any, Any, Tolerance]]) -> tuple[bool, dict[str, float], list[str]]:
    ok, errors, bad = True, {}, []
    for label, out, ref, tol in pairs:
        good, err = _close(torch, out, ref, tol)
        errors[label] = err
        if not good:
            ok = False
            bad.append(f"{label}: max |error| {err:.4g} outside {tol.describe()}")
    return ok, errors, bad


def check_bmm(tracker: Any, replays: int, device: int = 0) -> dict[str, Any]:
    """bf16 ``torch.bmm`` and ``torch.baddbmm`` (cuBLAS strided-batched GEMM) in a CUDA graph."""
    import torch

    tracker.phase("setup")
    torch.cuda.set_device(device)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    B, M, K, N = 16, 256, 512, 256
    kw = dict(device="cuda", dtype=torch.bfloat16, generator=gen)
    a, b, c = torch.randn(B, M, K, **kw), torch.randn(B, K, N, **kw), torch.randn(B, M, N, **kw)

    def step() -> tuple[Any, Any]:
        return torch.bmm(a, b), torch.baddbmm(c, a, b, beta=0.5, alpha=2.0)

    def reference() -> tuple[Any, Any]:
        prod = torch.bmm(a.float(), b.float())
        return prod, 0.5 * c.float() + 2.0 * prod

    eager, eager_ms = _eager(torch, step, tracker)
    graph, outs, metrics = _capture_and_replay(torch, step, replays, tracker)

    tracker.phase("compare")
    ref = reference()
    # Compare now: the static outputs are overwritten by the next replay.
    ok, errors, bad = _compare_all(torch, [
        ("bmm graph~eager", outs[0], eager[0], BF16_VS_EAGER),
        ("baddbmm graph~eager", outs[1], eager[1], BF16_VS_EAGER),
        ("bmm eager~fp32", eager[0], ref[0], BF16_VS_FP32),
        ("baddbmm eager~fp32", eager[1], ref[1], BF16_VS_FP32)])
    # New inputs in place: a replay must recompute from them.
    a.copy_(torch.randn(B, M, K, **kw))
    graph.replay()
    eager2 = step()
    torch.cuda.synchronize()
    ok2, errors2, bad2 = _compare_all(torch, [
        ("bmm new-input graph~eager", outs[0], eager2[0], BF16_VS_EAGER),
        ("baddbmm new-input graph~eager", outs[1], eager2[1], BF16_VS_EAGER)])
    ok, bad = ok and ok2, bad + bad2
    errors.update(errors2)
    graph_err = max(v for k, v in errors.items() if "graph~eager" in k)
    fp32_err = max(v for k, v in errors.items() if "fp32" in k)
    metrics.update(eager_first_ms=eager_ms, max_error_vs_fp32=fp32_err, shape=f"{B}x{M}x{K}x{N}")
    return {"ok": ok, "max_error": graph_err, "metrics": metrics,
            "tolerance": f"graph~eager {BF16_VS_EAGER.describe()}; eager~fp32 {BF16_VS_FP32.describe()}",
            "detail": "; ".join(bad) or None, "phase": "compare" if not ok else None}


def check_mlp(tracker: Any, replays: int, device: int = 0) -> dict[str, Any]:
    """A transformer MLP block in bf16 — RMSNorm, gate/up linear, SiLU-and-mul, down linear,
    residual — in a CUDA graph."""
    import torch
    import torch.nn.functional as F

    tracker.phase("setup")
    torch.cuda.set_device(device)
    gen = torch.Generator(device="cuda").manual_seed(4321)
    T, H, I = 64, 2048, 4096
    kw = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(T, H, generator=gen, **kw)
    w_norm = 1.0 + 0.1 * torch.randn(H, generator=gen, **kw)
    w_gate_up = torch.randn(2 * I, H, generator=gen, **kw) / H**0.5
    w_down = torch.randn(H, I, generator=gen, **kw) / I**0.5
    eps = 1e-6

    def block(inp: Any, wn: Any, wgu: Any, wd: Any) -> Any:
        h = inp.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        h = h.to(inp.dtype) * wn
        gate, up = F.linear(h, wgu).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, wd) + inp

    def step() -> Any:
        return block(x, w_norm, w_gate_up, w_down)

    def reference() -> Any:
        return block(x.float(), w_norm.float(), w_gate_up.float(), w_down.float())

    eager, eager_ms = _eager(torch, step, tracker)
    graph, out, metrics = _capture_and_replay(torch, step, replays, tracker)

    tracker.phase("compare")
    # Compare now: the static output is overwritten by the next replay.
    ok, errors, bad = _compare_all(torch, [("mlp graph~eager", out, eager, BF16_VS_EAGER),
                                           ("mlp eager~fp32", eager, reference(), BF16_VS_FP32)])
    x.copy_(torch.randn(T, H, generator=gen, **kw))
    graph.replay()
    eager2 = step()
    torch.cuda.synchronize()
    ok2, errors2, bad2 = _compare_all(torch, [("mlp new-input graph~eager", out, eager2, BF16_VS_EAGER)])
    ok, bad = ok and ok2, bad + bad2
    errors.update(errors2)
    metrics.update(eager_first_ms=eager_ms, max_error_vs_fp32=errors["mlp eager~fp32"], shape=f"T{T}xH{H}xI{I}")
    return {"ok": ok, "max_error": max(errors["mlp graph~eager"], errors["mlp new-input graph~eager"]),
            "metrics": metrics,
            "tolerance": f"graph~eager {BF16_VS_EAGER.describe()}; eager~fp32 {BF16_VS_FP32.describe()}",
            "detail": "; ".join(bad) or None, "phase": "compare" if not ok else None}


def allreduce_expected(torch: Any, base: Any, world: int, shift: int) -> Any:
    """Rank r contributes ``base + shift + r + 1``; the sum is ``world*(base+shift) + world*(world+1)/2``."""
    return world * (base.float() + shift) + world * (world + 1) / 2


INJECT_ENV = "FORGEPATCH_PROBE_INJECT"


class _FaultInjectingReporter:
    """Wraps a rank's reporter to inject a fault for testing the deadlines on real GPUs:
    ``FORGEPATCH_PROBE_INJECT=hang@1:capture`` makes rank 1 sleep when it enters phase
    ``capture``; ``crash@1:replay`` makes it SIGKILL itself there."""

    def __init__(self, reporter: Any, rank: int, spec: str):
        self.reporter, self.rank = reporter, rank
        kind, _, where = spec.partition("@")
        at_rank, _, phase = where.partition(":")
        if kind not in ("hang", "crash") or not at_rank.isdigit() or not phase:
            raise ValueError(f"{INJECT_ENV}: expected hang|crash@RANK:PHASE, got {spec!r}")
        self.kind, self.at_rank, self.at_phase = kind, int(at_rank), phase

    @property
    def current(self) -> str | None:
        return self.reporter.current

    def phase(self, name: str) -> None:
        self.reporter.phase(name)
        if self.rank == self.at_rank and name == self.at_phase:
            if self.kind == "hang":
                time.sleep(24 * 3600)
            import signal

            os.kill(os.getpid(), signal.SIGKILL)


def allreduce_rank(rank: int, world: int, params: dict, reporter: Any) -> dict[str, Any]:
    """One rank of the NCCL all-reduce check: eager all-reduce, then the same captured in a CUDA
    graph, replayed; each rank checks the exact sum (integer values < 256 are exact in bf16)."""
    for key, value in NCCL_SAFE_ENV.items():
        os.environ.setdefault(key, value)
    if os.environ.get(INJECT_ENV):
        reporter = _FaultInjectingReporter(reporter, rank, os.environ[INJECT_ENV])
    reporter.phase("import")
    import torch
    import torch.distributed as dist

    reporter.phase("init")
    t0 = time.perf_counter()
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    kwargs = dict(backend="nccl", init_method=params["init_method"], rank=rank, world_size=world)
    try:
        dist.init_process_group(device_id=dev, **kwargs)
    except TypeError:  # older torch: no device_id
        dist.init_process_group(**kwargs)
    numel, replays = int(params.get("numel", 1 << 20)), int(params.get("replays", 20))
    base = (torch.arange(numel, device=dev) % 7).to(torch.bfloat16)
    src = base + (rank + 1)
    buf = torch.empty_like(src)
    init_s = time.perf_counter() - t0

    reporter.phase("eager")
    buf.copy_(src)
    dist.all_reduce(buf)
    torch.cuda.synchronize()
    ok_eager, err_eager = _close(torch, buf, allreduce_expected(torch, base, world, 0), EXACT)

    def step() -> Any:
        buf.copy_(src)
        dist.all_reduce(buf)
        return buf

    graph, out, metrics = _capture_and_replay(torch, step, replays, reporter,
                                              before_replay=lambda: dist.barrier(device_ids=[rank]))
    reporter.phase("compare")
    ok_graph, err_graph = _close(torch, out, allreduce_expected(torch, base, world, 0), EXACT)
    src.add_(2)  # a replay must read the new input
    graph.replay()
    torch.cuda.synchronize()
    ok_new, err_new = _close(torch, out, allreduce_expected(torch, base, world, 2), EXACT)

    reporter.phase("teardown")
    del graph
    dist.destroy_process_group()
    ok = ok_eager and ok_graph and ok_new
    bad = [label for label, good in (("eager", ok_eager), ("graph", ok_graph), ("new-input graph", ok_new)) if not good]
    metrics.update(init_s=init_s, numel=numel, dtype="bfloat16")
    return {"ok": ok, "max_error": max(err_eager, err_graph, err_new), "tolerance": "exact sum",
            "metrics": metrics, "phase": None if ok else "compare",
            "signature": None if ok else f"wrong all-reduce sum ({', '.join(bad)})"}
