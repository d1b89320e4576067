"""The graph-capture probe: ``python -m forgepatch.inimage.probe [--arch A] [--gpus N] [--json]``.

Runs inside images that hold torch and nothing else of forgepatch's dependencies: it imports the
standard library, ``forgepatch.arch`` and this package at module level, and torch only inside
functions (``--help`` works without torch). It reports versions, GPUs and the arch list torch was
built for, refuses an incompatible device with the reason, then captures CUDA graphs (bf16
bmm/baddbmm, an MLP block, and with ``--gpus N >= 2`` an NCCL all-reduce, one process per GPU),
replays them and compares with eager mode.

Exit codes: 0 pass · 1 fail · 2 bad input (one line on stderr) · 3 incompatible or no GPU.
Phases go to stderr as ``[forgepatch-probe] phase=... check=... begin`` lines; stdout holds the
summary, or one JSON document with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import time
from typing import Any, NoReturn, Sequence

from forgepatch import arch as archmod
from forgepatch.errors import BadInput
from forgepatch.inimage import imported, probe_checks, toolchain
from forgepatch.inimage.harness import RankGroup, log_line, rank_check_result, run_check
from forgepatch.inimage.probe_checks import NCCL_SAFE_ENV
from forgepatch.inimage.probe_result import (
    EXIT_CODES, FAIL, INCOMPATIBLE, NO_GPU, PASS, CheckResult, aggregate_verdict,
    assess_devices, build_document, format_summary,
)

_T0 = time.monotonic()
ARCH_ENV = "FORGEPATCH_ARCH"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage too)
        raise BadInput(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="forgepatch-probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", help=f"expected arch ({', '.join(archmod.ARCHES)}); default ${ARCH_ENV}")
    p.add_argument("--gpus", type=int, default=1, help="GPUs to use; >= 2 adds the NCCL all-reduce check")
    p.add_argument("--replays", type=int, default=20, help="graph replays per check (>= 1)")
    p.add_argument("--deadline", type=float, default=120.0, help="seconds each check (and each rank) may take")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse and validate what can be checked without torch; BadInput on bad input."""
    args = _parser().parse_args(argv)
    if args.replays < 1:
        raise BadInput(f"--replays must be >= 1 (got {args.replays})")
    if args.gpus < 1:
        raise BadInput(f"--gpus must be >= 1 (got {args.gpus})")
    if not args.deadline > 0:
        raise BadInput(f"--deadline must be > 0 (got {args.deadline})")
    args.expected, args.expected_source = None, None
    name, source = (args.arch, "--arch") if args.arch else (os.environ.get(ARCH_ENV), ARCH_ENV)
    if name:
        try:
            args.expected = archmod.get_arch(name)
        except BadInput:
            raise BadInput(f"{source}: unknown arch {name!r} (known: {', '.join(archmod.ARCHES)})") from None
        args.expected_source = source
    return args


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _inventory(torch: Any) -> tuple[dict, list[dict], list[str]]:
    nccl = None
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # noqa: BLE001 - a build without NCCL
        pass
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }
    devices = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        known = archmod.arch_for_cc((p.major, p.minor))
        devices.append({"index": i, "name": p.name, "cc": f"{p.major}.{p.minor}",
                        "arch": known.name if known else None,
                        "memory_gib": round(p.total_memory / 2**30, 1),
                        "multiprocessors": p.multi_processor_count})
    return versions, devices, list(torch.cuda.get_arch_list())


def run_probe(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """Run the probe; returns (document, hung) — ``hung`` when a check thread is still stuck.

    With ``--gpus N >= 2`` the rank processes are spawned before anything else, so their
    ``import torch`` overlaps the parent's and the local checks; they are stopped if the probe
    ends early (no GPU, incompatible, bad input)."""
    for key, value in NCCL_SAFE_ENV.items():
        os.environ.setdefault(key, value)
    timings: dict[str, float] = {}
    settings = {"gpus": args.gpus, "replays": args.replays, "deadline_s": args.deadline,
                "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE")}
    expected = args.expected.name if args.expected else None
    found = toolchain.collect()  # before torch is imported: reported even if the import dies
    print(toolchain.line(found), file=sys.stderr, flush=True)
    doc_args: dict[str, Any] = dict(versions={"python": platform.python_version()}, devices=[],
                                    torch_arch_list=[], expected_arch=expected,
                                    expected_arch_source=args.expected_source, compatibility=None,
                                    settings=settings, toolchain=found)

    def finish(verdict: str, reason: str, checks: list[CheckResult], hung: bool = False):
        if not hung:  # what this process imports (after torch, which FlashInfer imports itself)
            t0 = time.monotonic()
            doc_args["imported"] = imported.collect()
            timings["imported_s"] = time.monotonic() - t0
            print(imported.line(doc_args["imported"]), file=sys.stderr, flush=True)
        timings["total_s"] = time.monotonic() - _T0
        log_line(phase="verdict", verdict=verdict, seconds=round(timings["total_s"], 3))
        return build_document(verdict=verdict, reason=reason, checks=checks, timings=timings,
                              seconds=timings["total_s"], **doc_args), hung

    group = None
    if args.gpus >= 2:  # spawn the ranks first: their torch import overlaps the parent's
        group = RankGroup("allreduce", probe_checks.allreduce_rank, args.gpus,
                          {"init_method": f"tcp://127.0.0.1:{_free_port()}", "replays": args.replays},
                          deadline_s=args.deadline, env=probe_checks.NCCL_SAFE_ENV).start()
    try:
        return _run_checks(args, group, finish, doc_args, timings)
    finally:
        if group is not None and not group.collected:
            group.abort()


def _run_checks(args: argparse.Namespace, group: RankGroup | None, finish: Any,
                doc_args: dict[str, Any], timings: dict[str, float]) -> tuple[dict[str, Any], bool]:
    log_line(phase="import", check="torch", begin=True)
    t0 = time.monotonic()
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken install
        return finish(NO_GPU, f"torch is not importable: {type(exc).__name__}: {exc}", [])
    timings["import_torch_s"] = time.monotonic() - t0

    log_line(phase="detect", check="devices", begin=True)
    t0 = time.monotonic()
    try:
        available = torch.cuda.is_available() and torch.cuda.device_count() > 0
    except Exception as exc:  # noqa: BLE001
        available, why = False, f"{type(exc).__name__}: {exc}"
    else:
        why = "torch.cuda.is_available() is False" + ("" if torch.version.cuda else f" (CPU build {torch.__version__})")
    if not available:
        doc_args["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                                "cuda": torch.version.cuda}
        doc_args["torch_arch_list"] = list(torch.cuda.get_arch_list()) if torch.version.cuda else []
        return finish(NO_GPU, f"no CUDA device: {why}", [])
    versions, devices, arch_list = _inventory(torch)
    timings["detect_s"] = time.monotonic() - t0
    doc_args.update(versions=versions, devices=devices, torch_arch_list=arch_list)
    # what torch itself reports is exact: it wins over the metadata found before the import
    doc_args["toolchain"] = {**doc_args["toolchain"], "torch": versions["torch"], "cuda_runtime": versions["cuda"],
                             "nccl": versions["nccl"] or doc_args["toolchain"].get("nccl"),
                             "gpus": [d["name"] for d in devices]}
    if args.gpus > len(devices):
        raise BadInput(f"--gpus {args.gpus}: this machine has {len(devices)} GPU(s)")

    used = [(d["name"] + f" #{d['index']}", tuple(int(x) for x in d["cc"].split("."))) for d in devices[: args.gpus]]
    ok, reasons = assess_devices(arch_list, used, args.expected)
    doc_args["compatibility"] = {"ok": ok, "reasons": reasons}
    if not ok:
        bad = [r for r in reasons if "no target" in r or "run only on" in r]
        return finish(INCOMPATIBLE, "; ".join(bad) or "; ".join(reasons), [])

    checks: list[CheckResult] = []
    hung = False
    for name, fn in (("bmm", probe_checks.check_bmm), ("mlp", probe_checks.check_mlp)):
        if hung:
            checks.append(CheckResult(name, "skipped", detail="an earlier check hung the device"))
            continue
        result, hung = run_check(name, lambda tracker, fn=fn: fn(tracker, args.replays), args.deadline,
                                 while_waiting=group.poll if group is not None else None)
        checks.append(result)
    if group is not None:
        t0 = time.monotonic()
        outcomes = group.wait()
        checks.append(rank_check_result("allreduce", outcomes, time.monotonic() - group.started_at))
        timings["allreduce_wait_s"] = time.monotonic() - t0
    verdict = aggregate_verdict(checks)
    failed = [c for c in checks if c.status == FAIL]
    reason = ("all checks passed" if verdict == PASS
              else "; ".join(f"{c.name} failed in phase {c.phase}: {c.signature}" for c in failed))
    return finish(verdict, reason, checks, hung)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        doc, hung = run_probe(args)
    except BadInput as exc:
        print(f"forgepatch-probe: error: {exc}", file=sys.stderr, flush=True)
        return 2
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(format_summary(doc) + "\n")
    sys.stdout.flush()
    code = EXIT_CODES[doc["verdict"]]
    if hung:  # a check thread is stuck in the driver: don't wait for it at interpreter exit
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
