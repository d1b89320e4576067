"""The stack a job runs on: versions of torch, the CUDA runtime, NCCL, cuBLAS, cuDNN,
FlashInfer, sgl-kernel, Triton and SGLang (those present), the NVIDIA driver and the GPUs.

Found without importing torch or creating a CUDA context (so the server driver can report it
before the server starts, and it costs well under a second): installed distributions'
metadata, ``torch/version.py`` read as text, the libraries' own version calls through ctypes
when no metadata names them, and the driver's ``/proc/driver/nvidia`` files (``nvidia-smi``
when those are absent). Standard library only.

    python3 -m forgepatch.inimage.toolchain            # one line: [forgepatch-toolchain] {...}
    python3 -m forgepatch.inimage.toolchain --json     # the JSON document alone
    python3 -m forgepatch.inimage.toolchain --exec -- CMD ARGS...   # the line, then exec CMD

The host-side monitor reads the line from any job's log (``TOOLCHAIN_PREFIX``).
"""

from __future__ import annotations

import ctypes
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from typing import Any

TOOLCHAIN_PREFIX = "[forgepatch-toolchain]"

# field -> distribution names that carry it, first found wins
DISTRIBUTIONS = {
    "torch": ("torch",),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl"),
    "cublas": ("nvidia-cublas-cu13", "nvidia-cublas-cu12", "nvidia-cublas"),
    "cudnn": ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn"),
    "flashinfer": ("flashinfer-python", "flashinfer"),
    "sgl_kernel": ("sgl-kernel", "sglang-kernel"),
    "triton": ("triton", "pytorch-triton"),
    "sglang": ("sglang",),
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    """Normalised distribution name -> version, in one pass over sys.path."""
    out: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata.get("Name") if dist.metadata else None
        if name and _norm(name) not in out:
            out[_norm(name)] = dist.version
    return out


def _package_file(module: str, name: str) -> str | None:
    """Text of ``name`` inside ``module``'s package directory, found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
        return None
    try:
        with open(os.path.join(os.path.dirname(spec.origin), name), encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def torch_cuda() -> str | None:
    """The CUDA version torch was built with (``torch/version.py``'s ``cuda``)."""
    text = _package_file("torch", "version.py") or ""
    m = re.search(r"^cuda\b[^=\n]*=\s*['\"]([0-9.]+)['\"]", text, re.M)
    return m.group(1) if m else None


def sglang_version() -> str | None:
    """The SGLang package's own version literal (a source install has no metadata)."""
    for name in ("version.py", "_version.py"):
        m = re.search(r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", _package_file("sglang", name) or "", re.M)
        if m:
            return m.group(1)
    return None


def _library(names: tuple[str, ...]) -> Any:
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def nccl_from_library() -> str | None:
    lib = _library(("libnccl.so.2", "libnccl.so"))
    if lib is None:
        return None
    code = ctypes.c_int()
    if lib.ncclGetVersion(ctypes.byref(code)) != 0:
        return None
    v = code.value  # NCCL >= 2.9: major*10000 + minor*100 + patch
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 20900 else f"{v // 1000}.{v // 100 % 10}.{v % 100}"


def cublas_from_library() -> str | None:
    lib = _library(("libcublas.so.13", "libcublas.so.12", "libcublas.so"))
    if lib is None:
        return None
    parts = []
    for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        value = ctypes.c_int()
        if lib.cublasGetProperty(prop, ctypes.byref(value)) != 0:
            return None
        parts.append(str(value.value))
    return ".".join(parts)


def driver_and_gpus() -> tuple[str | None, list[str]]:
    """The NVIDIA driver version and the GPU names this process can see."""
    driver, gpus = None, []
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            m = re.search(r"Kernel Module(?: for \w+)?\s+([0-9][0-9.]+)", fh.read())
            driver = m.group(1) if m else None
    except OSError:
        pass
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        try:
            with open(info, encoding="utf-8") as fh:
                m = re.search(r"^Model:\s*(.+)$", fh.read(), re.M)
        except OSError:
            continue
        if m:
            gpus.append(m.group(1).strip())
    if (driver is None or not gpus) and shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is not None and out.returncode == 0:
            rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if "," in line]
            gpus = gpus or [r[0] for r in rows]
            driver = driver or (rows[0][1] if rows else None)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible and gpus and all(x.strip().isdigit() for x in visible.split(",")):
        gpus = [gpus[int(x)] for x in visible.split(",") if int(x) < len(gpus)]
    return driver, gpus


def collect() -> dict[str, Any]:
    """The toolchain document (keys of ``combination.results.Toolchain``)."""
    have = installed()

    def dist(field: str) -> str | None:
        return next((have[n] for n in DISTRIBUTIONS[field] if n in have), None)

    doc: dict[str, Any] = {"python": platform.python_version()}
    doc["torch"] = dist("torch")
    doc["cuda_runtime"] = torch_cuda()
    doc["nccl"] = dist("nccl") or (nccl_from_library() if doc["torch"] else None)
    doc["cublas"] = dist("cublas") or (cublas_from_library() if doc["torch"] else None)
    doc["cudnn"] = dist("cudnn")
    doc["flashinfer"] = dist("flashinfer")
    doc["sgl_kernel"] = dist("sgl_kernel")
    doc["triton"] = dist("triton")
    doc["sglang"] = sglang_version() or dist("sglang")
    doc["driver"], doc["gpus"] = driver_and_gpus()
    return doc


def doc_line(prefix: str, doc: dict[str, Any]) -> str:
    """A JSON document as one log line after ``prefix`` (the toolchain and imported lines)."""
    return f"{prefix} {json.dumps(doc, sort_keys=True)}"


def parse_doc_line(prefix: str, text: str) -> dict[str, Any] | None:
    """The document of a ``PREFIX {...}`` log line (None if it is not one)."""
    at = text.find(prefix)
    if at < 0:
        return None
    try:
        doc = json.loads(text[at + len(prefix):].strip())
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def line(doc: dict[str, Any] | None = None) -> str:
    return doc_line(TOOLCHAIN_PREFIX, collect() if doc is None else doc)


def parse_line(text: str) -> dict[str, Any] | None:
    """The document of a ``[forgepatch-toolchain] {...}`` log line (None if it is not one)."""
    return parse_doc_line(TOOLCHAIN_PREFIX, text)


def prelude(python: str, argv: list[str]) -> list[str]:
    """``argv`` run through ``sh`` after this module printed its line with ``python`` (an
    image or host without forgepatch or python just runs ``argv``: the report is best effort)."""
    script = f'{shlex.quote(python)} -m forgepatch.inimage.toolchain 2>/dev/null; exec "$@"'
    return ["sh", "-c", script, "forgepatch-job", *argv]


def report(prefix: str, collect_doc, args: list[str]) -> bool:
    """The report step of a ``python -m`` report module (toolchain, imported): ``--json`` prints
    the document (True: nothing else to do); otherwise its one log line after ``prefix``, a
    failure reported on that line, never raised (a report must never stop the job it precedes)."""
    if args[:1] == ["--json"]:
        print(json.dumps(collect_doc(), indent=2, sort_keys=True), flush=True)
        return True
    try:
        print(doc_line(prefix, collect_doc()), flush=True)
    except Exception as exc:  # noqa: BLE001 - see above
        print(f"{prefix} error {type(exc).__name__}: {exc}", flush=True)
    return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if report(TOOLCHAIN_PREFIX, collect, args):
        return 0
    if args[:1] == ["--exec"]:
        command = args[2:] if args[1:2] == ["--"] else args[1:]
        if not command:
            print("forgepatch-toolchain: error: --exec needs a command", file=sys.stderr)
            return 2
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"forgepatch-toolchain: error: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
            return 127
    return 0


if __name__ == "__main__":
    sys.exit(main())
