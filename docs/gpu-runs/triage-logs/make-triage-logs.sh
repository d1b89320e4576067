#!/usr/bin/env bash
# Makes the `forgepatch triage` fixture logs (tests/fixtures/logs/) on a GPU host: every fault
# in its own process, its stdout+stderr unedited, through a bash that reports a death by signal
# the way a launcher's shell does. Usage: OUT=/tmp/out bash make-triage-logs.sh
# Needs: nvcc, python3 with torch, triton and cupy (the lent H200 image has them).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/triage-logs-out}
LOGS=$OUT/logs
BUILD=$(mktemp -d)
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ulimit -c 0
{
  date -u; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv; nvcc --version | tail -2
  python3 -c 'import torch, triton, cupy; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "triton", triton.__version__, "cupy", cupy.__version__)'
} >"$LOGS/ENV.txt" 2>&1

cd "$BUILD"
cp "$HERE/triage_cuda.cu" "$HERE/triage_faults.py" .
{
  set -x
  nvcc -O2 -gencode arch=compute_120,code=sm_120 -o cuda_sm120 triage_cuda.cu -lcuda
  nvcc -O2 -gencode arch=compute_120,code=compute_120 -o cuda_ptx120 triage_cuda.cu -lcuda
  nvcc -O2 -gencode arch=compute_90,code=sm_90 -o cuda_sm90 triage_cuda.cu -lcuda
  nvcc -ptx -arch=compute_90 -o k90.ptx triage_cuda.cu
  nvcc -ptx -arch=compute_120 -o k120.ptx triage_cuda.cu
  sed -E 's/^\.version [0-9.]+/.version 9.9/' k90.ptx >k90-isa99.ptx
  sed -E 's/\bst\.global\.f32\b/st.global.nosuchop.f32/' k90.ptx >k90-broken.ptx
  grep -n '^\.version\|^\.target' k90.ptx k120.ptx k90-isa99.ptx
  grep -c nosuchop k90-broken.ptx
  set +x
} >"$LOGS/BUILD.txt" 2>&1

fault() {  # fault NAME SECONDS COMMAND...: the command's output is the log NAME.log
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout -s KILL "$secs" bash -c "$*; exit \$?" >"$LOGS/$name.log" 2>&1
  echo "$name rc=$? wall=$((SECONDS - t0))s cmd=$*" >>"$LOGS/RC.txt"
  tar -C "$OUT" -czf "$OUT/triage-logs.tar.gz" logs  # what ran so far comes back even if a later fault hangs
}

py="python3 triage_faults.py"
fault segfault 60 "$py segv"
fault fatal-python-segfault 60 "$py segv-faulthandler"
fault aborted 60 "$py abort"
fault killed 60 "$py killed"
fault no-kernel-image-code209 60 "./cuda_sm120 launch"
fault ptx120-on-sm90 60 "./cuda_ptx120 launch"
fault ptx-isa-too-new 60 "./cuda_sm90 ptx k90-isa99.ptx"
fault ptx-arch-too-new 60 "./cuda_sm90 ptx k120.ptx"
fault ptx-invalid 60 "./cuda_sm90 ptx k90-broken.ptx"
fault ptx-too-new-cupy 60 "PTX_FILE=k90-isa99.ptx $py ptx-too-new"
fault watchdog-timeout 90 "$py watchdog"
fault duplicate-gpu 60 "$py duplicate-gpu"
fault nccl-no-socket-interface 60 "NCCL_SOCKET_IFNAME=nosuchif $py no-socket-if"
fault triton-shared-memory 90 "$py triton-smem"
fault cublas-invalid-value 60 "$py cublas-invalid"
fault misaligned-address 60 "$py misaligned"
fault capture-sync 60 "$py capture-sync"
fault capture-unjoined 60 "$py capture-unjoined"
fault capture-cpu-copy 60 "$py capture-cpu-copy"
fault capture-wrapped 60 "$py capture-wrapped"
fault noisy-serving-watchdog 150 "$py noisy-watchdog"
fault noisy-serving-illegal-address 120 "$py noisy-illegal"
cd "$LOGS" && wc -l *.log >>RC.txt
tar -C "$OUT" -czf "$OUT/triage-logs.tar.gz" logs && rm -rf "$LOGS"
tar -xzOf "$OUT/triage-logs.tar.gz" logs/RC.txt logs/ENV.txt
