#!/bin/bash
# The probe on two H200s (device kind nvidia-h200-x2), as run for docs/gpu-runs/. Expects $OUT.
set -u
# Run from the repo (docs/gpu-runs/) or from a copy holding src/ beside this script.
cd "$(dirname "$0")"; [ -d src ] || cd ../..
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T=$OUT/h200x2-times.txt L=$OUT/h200x2.log
wall() {  # NAME STDOUT-FILE COMMAND...: run it, stderr to the log, exit code and wall time to $T
  local name=$1 out=$2; shift 2
  echo "=== $name: $*" >>"$L"
  local s; s=$(date +%s.%N)
  "$@" >"$out" 2>>"$L"; local rc=$?
  local e; e=$(date +%s.%N)
  echo "$name rc=$rc wall_s=$(python3 -c "print(round($e-$s, 3))")" >>"$T"
}
{ date -u; nvidia-smi -L; nvidia-smi topo -m; python3 --version; } >>"$T" 2>&1
P="python3 -m forgepatch.inimage.probe"
wall probe_x2_run1_cold "$OUT/h200x2.json" $P --json --arch sm90 --gpus 2
wall probe_x2_run2 "$OUT/h200x2-run2.json" $P --json --arch sm90 --gpus 2
wall probe_x2_gpus1 "$OUT/h200x2-gpus1.json" $P --json --arch sm90
wall cli_probe_x2 "$OUT/h200x2-cli.json" python3 -c 'import sys; from forgepatch.cli import main; sys.exit(main())' probe --json --arch sm90 --gpus 2
# Deadlines with real NCCL ranks: rank 1 hangs before capture / is killed during replay.
FORGEPATCH_PROBE_INJECT=hang@1:capture wall inject_hang "$OUT/h200x2-inject-hang.json" $P --json --gpus 2 --deadline 25
FORGEPATCH_PROBE_INJECT=crash@1:replay wall inject_crash "$OUT/h200x2-inject-crash.json" $P --json --gpus 2 --deadline 60
cat "$T"
