"""Launch each audit fixture's kernels on this machine's GPU: ground truth for the audit.

    python3 audit_launch.py DIR  -> JSON {library: {function: [cudaError code, name]}}

Each library is loaded in its own process (ctypes); ``fp_run`` launches the kernel of
kernels.cu, ``fp_run_b`` (libfp_mixed.so) the one of kernels_b.cu. 0 means it ran;
209 is cudaErrorNoKernelImageForDevice.
"""
import ctypes
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaGetErrorName.restype = ctypes.c_char_p
out = {}
for fn in ("fp_run", "fp_run_b"):
    if hasattr(lib, fn):
        code = getattr(lib, fn)()
        out[fn] = [code, rt.cudaGetErrorName(code).decode()]
print(json.dumps(out))
"""

results = {}
for so in sorted(Path(sys.argv[1]).glob("libfp_*.so")):
    proc = subprocess.run([sys.executable, "-c", CHILD, str(so)], capture_output=True, text=True, timeout=120)
    results[so.name] = json.loads(proc.stdout) if proc.returncode == 0 else {"error": proc.stderr[-400:]}
print(json.dumps(results, indent=1))
