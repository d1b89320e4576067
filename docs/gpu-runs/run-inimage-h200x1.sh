#!/bin/bash
# forgepatch.inimage (the probe, moved from forgepatch.smoke.probe, and the toolchain record)
# on one H200 (device kind nvidia-h200), as run for docs/gpu-runs/ (issue 12). Expects $OUT.
# Run from the repo (docs/gpu-runs/) or from a copy holding src/ (and whl/: pydantic and its
# needs, platformdirs, which the GPU image lacks) beside this script.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"; [ -d src ] || cd ../..
if [ -d "$here/whl" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl || exit
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export FORGEPATCH_CACHE_DIR=/tmp/forgepatch-cache
T=$OUT/inimage-times.txt L=$OUT/inimage-stderr.log
wall() {  # NAME STDOUT-FILE COMMAND...: run it, stderr to the log, exit code and wall time to $T
  local name=$1 out=$2; shift 2
  echo "=== $name: $*" | tee -a "$T" >>"$L"
  local s; s=$(date +%s.%N)
  "$@" >"$out" 2>>"$L"; local rc=$?
  local e; e=$(date +%s.%N)
  echo "$name rc=$rc wall_s=$(python3 -c "print(round($e-$s, 3))")" >>"$T"
}
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; python3 --version; } >>"$T" 2>&1
FP="python3 -m forgepatch"
wall toolchain "$OUT/inimage-toolchain.json" python3 -m forgepatch.inimage.toolchain --json
wall probe "$OUT/inimage-probe.json" python3 -m forgepatch.inimage.probe --json --arch sm90
wall probe_cli "$OUT/inimage-probe-cli.json" $FP probe --json --arch sm90
wall smoke_local "$OUT/inimage-smoke.json" $FP --config "$here/smoke-matrix-inimage.toml" smoke --runner local \
  --json --logs /tmp/smoke-logs --markdown "$OUT/inimage-smoke.md"
cat /tmp/smoke-logs/*/sm90-v0.5.23-probe.log > "$OUT/inimage-smoke-probe-job.log" 2>/dev/null
cat "$T"
