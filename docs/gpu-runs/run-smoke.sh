#!/bin/bash
# `forgepatch smoke --runner local` on a GPU host, then `forgepatch triage` on the failing
# job's log, as run for docs/gpu-runs/. Expects $OUT; everything it makes lands in
# $OUT/smoke-results.tar.gz (plus copies of the reports).
#   run-smoke.sh MATRIX FAILING-JOB-ID [MATRIX-TOO-BIG]
# MATRIX (a file beside this script) is smoked in full; FAILING-JOB-ID names the job whose log
# `triage` reads; MATRIX-TOO-BIG, if given, is smoked too and must be refused (exit 2: a
# profile asks for more GPUs than the host has).
#   e.g. run-smoke.sh smoke-matrix.toml sm90-v0.5.23-probe-x2-crash               (2 GPUs)
#        run-smoke.sh smoke-matrix-h200x1.toml sm120-v0.5.23-probe smoke-matrix.toml (1 GPU)
set -u
[ $# -ge 2 ] || { echo "usage: $0 MATRIX FAILING-JOB-ID [MATRIX-TOO-BIG]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
MATRIX=$here/$1 FAILED_JOB=$2 TOO_BIG=${3:+$here/$3}
cd "$here"; [ -d src ] || cd ../..   # a copy holding src/ beside this script, or the repo
SRC=$PWD/src
# Wheels for what the GPU image lacks (pydantic and its needs, platformdirs), if carried in whl/.
if [ -d "$here/whl" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl || exit
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$SRC${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export FORGEPATCH_CACHE_DIR=/tmp/forgepatch-cache
R=/tmp/smoke-results; rm -rf "$R"; mkdir -p "$R"; cd "$R"   # relative log paths in the reports
T=$R/run.txt
fp() { python3 -c 'import sys; from forgepatch.cli import main; sys.exit(main())' "$@"; }
step() {  # NAME COMMAND...: note the command, run it, note exit code and wall time
  local name=$1; shift
  echo "=== $name: $*" >>"$T"
  local s; s=$(date +%s.%N)
  "$@"; local rc=$?
  local e; e=$(date +%s.%N)
  echo "=== $name rc=$rc wall_s=$(python3 -c "print(round($e-$s, 3))")" >>"$T"
}
{ date -u; uname -r; nvidia-smi -L; nvidia-smi topo -m; python3 --version
  python3 - <<'PY'
import importlib.metadata as m, importlib.util as u
def v(p):
    try:
        return m.version(p)
    except m.PackageNotFoundError:
        return "absent"
print("; ".join(f"{p} {v(p)}" for p in ("torch", "typer", "rich", "click", "pydantic", "pydantic-core", "typing-extensions", "platformdirs", "packaging", "filelock")))
print("not importable:", [n for n in ("libcst", "git", "docker", "tomlkit") if u.find_spec(n) is None])
PY
} >>"$T" 2>&1
step smoke fp --config "$MATRIX" smoke --runner local --json --junit smoke-junit.xml \
  --markdown smoke.md --logs logs >smoke.json 2>smoke-stderr.txt
CRASH_LOG=$(ls logs/*/"$FAILED_JOB".log)
step triage fp triage "$CRASH_LOG" >triage.txt 2>&1
step triage_json fp triage --json "$CRASH_LOG" >triage.json 2>>"$T"
if [ -n "$TOO_BIG" ]; then
  step too_big fp --config "$TOO_BIG" smoke --runner local --json --logs logs-too-big >too-big.json 2>too-big.txt
fi
# which modules the smoke CLI path imported (parent process): no libcst/git/docker expected
python3 -X importtime -c 'import sys; from forgepatch.cli import main; sys.exit(main())' --config "$MATRIX" \
  smoke --runner local --arch sm90 --profile probe --pin v0.5.23 --json --logs logs-importtime >/dev/null 2>importtime.txt
echo "=== importtime run rc=$?; third-party top-level modules imported:" >>"$T"
python3 -c 'import sys,re; mods={re.split(r"[.|]", l.split("|")[2].strip())[0] for l in open("importtime.txt") if l.startswith("import time:") and "|" in l}; print(sorted(m for m in mods if m not in sys.stdlib_module_names and not m.startswith("_") and m != "imported package"))' >>"$T" 2>&1
cat "$T" smoke-stderr.txt smoke.md triage.txt ${TOO_BIG:+too-big.txt}
tar czf "$OUT/smoke-results.tar.gz" -C "$R" .
cp smoke.json smoke-junit.xml smoke.md run.txt triage.txt "$OUT/"
