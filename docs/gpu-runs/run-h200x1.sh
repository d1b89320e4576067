#!/bin/bash
# The probe on one H200 (device kind nvidia-h200), as run for docs/gpu-runs/. Expects $OUT.
set -u
# Run from the repo (docs/gpu-runs/) or from a copy holding src/ beside this script.
cd "$(dirname "$0")"; [ -d src ] || cd ../..
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
T=$OUT/h200x1-times.txt L=$OUT/h200x1.log
wall() {  # NAME STDOUT-FILE COMMAND...: run it, stderr to the log, exit code and wall time to $T
  local name=$1 out=$2; shift 2
  echo "=== $name: $*" >>"$L"
  local s; s=$(date +%s.%N)
  "$@" >"$out" 2>>"$L"; local rc=$?
  local e; e=$(date +%s.%N)
  echo "$name rc=$rc wall_s=$(python3 -c "print(round($e-$s, 3))")" >>"$T"
}
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; python3 --version; } >>"$T" 2>&1
P="python3 -m forgepatch.inimage.probe"
wall probe_run1_cold "$OUT/h200x1.json" $P --json --arch sm90
wall import_torch /dev/null python3 -c 'import torch'
wall probe_run2 "$OUT/h200x1-run2.json" $P --json --arch sm90
wall probe_run3 "$OUT/h200x1-run3.json" $P --json --arch sm90
wall incompatible_sm120 "$OUT/h200x1-incompatible.json" $P --json --arch sm120
wall deadline_50ms "$OUT/h200x1-deadline.json" $P --json --deadline 0.05
wall gpus_too_many /dev/null $P --gpus 2
wall replays_negative /dev/null $P --replays -1
wall cli_probe "$OUT/h200x1-cli.json" python3 -c 'import sys; from forgepatch.cli import main; sys.exit(main())' probe --json --arch sm90
cat "$T"
