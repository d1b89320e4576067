#!/bin/bash
# The audit's GPU run (device kind nvidia-h200), as run for docs/gpu-runs/2026-12-01-audit/.
# Builds the CUDA fixtures with this machine's nvcc, launches them (ground truth), lists them
# with cuobjdump, audits them and the installed torch, and benchmarks audit vs whole reads.
# Expects $OUT; run from a copy holding src/, bench/, tests/fixtures/cuda/ and this folder
# (plus .whl/pyelftools-*.whl where pyelftools is not installed).
set -u
cd "$(dirname "$0")"; [ -d src ] || cd ../..
R=$OUT/run; mkdir -p "$R"
LOG=$R/run.log
exec > >(tee -a "$LOG") 2>&1
step() { echo; echo "=== $*"; }
if ! python3 -c 'import elftools' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/pyelftools-*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
FA="python3 -m forgepatch audit"
step environment
date -u; nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv; python3 --version
nvcc --version; nvcc --help | grep -E -- '--(no-compress|compress-mode)'; which cuobjdump
step build fixtures
time bash tests/fixtures/cuda/build.sh /tmp/fixtures
tar czf "$OUT/fixtures.tgz" -C /tmp/fixtures .
step launch fixtures on the GPU
python3 docs/gpu-runs/audit_launch.py /tmp/fixtures | tee "$R/launch.json"
step cuobjdump of the fixtures
for f in /tmp/fixtures/*.so; do echo "## $(basename $f)"; cuobjdump --list-elf --list-ptx "$f"; done > "$R/cuobjdump-fixtures.txt" 2>&1
cat "$R/cuobjdump-fixtures.txt"
step audit fixtures
for a in sm90 sm120; do $FA --arch $a --dir /tmp/fixtures --json > "$R/audit-fixtures-$a.json"; echo "audit $a rc=$?"; done
step torch
SITE=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
TLIB=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
echo "site=$SITE torchlib=$TLIB"
python3 -c 'import json, torch; print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "arch_list": torch.cuda.get_arch_list(), "device": torch.cuda.get_device_name(0), "cc": list(torch.cuda.get_device_capability(0))}))' | tee "$R/torch.json"
ls -la "$TLIB"/*.so* | sort -k5 -n | tail -12
time $FA --arch sm90 --dir "$TLIB" --json > "$R/audit-torch-sm90.json"; echo "audit torch rc=$?"
for a in sm100 sm103 sm120 sm121; do $FA --arch $a --dir "$TLIB" --markdown > "$R/audit-torch-$a.md"; echo "audit torch $a rc=$?"; done
step cuobjdump of libtorch_cuda.so
for kind in elf ptx; do
  echo "## --list-$kind"; timeout 240 cuobjdump --list-$kind "$TLIB/libtorch_cuda.so" | sed -E 's/.*\.(sm_[0-9]+[af]?|compute_[0-9]+[af]?)\.(cubin|ptx)$/\1 \2/' | sort | uniq -c
done > "$R/cuobjdump-torch.txt" 2>&1
cat "$R/cuobjdump-torch.txt"
step audit the whole site-packages
time $FA --arch sm90 --dir "$SITE" --json > "$R/audit-site-sm90.json"; echo "audit site rc=$?"
step bench: audit vs whole reads
python3 bench/audit.py --dir "$SITE" --arch sm90 --rounds 3 --baseline-first | tee "$R/bench-site.json"
tar czf "$OUT/run.tgz" -C "$OUT" run
