#!/bin/bash
# Third audit run (final code): the committed fixtures and the installed torch/site-packages audited
# with stub detection (small compressed cubins opened to count kernels), libcufft's one cubin
# extracted with cuobjdump to see what it holds, and the benchmark. Expects $OUT; run from a copy
# holding src/, bench/, tests/fixtures/cuda/, this folder and .whl/ (pyelftools, zstandard, lz4).
set -u
cd "$(dirname "$0")"; [ -d src ] || cd ../..
R=$OUT/run3; mkdir -p "$R"
exec > >(tee -a "$R/run.log") 2>&1
if ! python3 -c 'import elftools, zstandard, lz4' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1
FA="python3 -m forgepatch audit"
SITE=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
L=$SITE/nvidia/cu13/lib
echo "=== libcufft's only cubin"
mkdir -p /tmp/cufft && (cd /tmp/cufft && cuobjdump -xelf all "$L/libcufft.so.12" && ls -la && readelf -SW *.cubin | grep -E '\.text|\.nv\.info\.' ; echo "kernels (.text.*): $(readelf -SW *.cubin | grep -c ' \.text\.')")
echo "=== audit fixtures (committed, built in run 1)"
for a in sm90 sm100 sm103 sm120 sm121; do $FA --arch $a --dir tests/fixtures/cuda --json > "$R/audit-fixtures-$a.json"; echo "fixtures $a rc=$?"; done
echo "=== audit torch/lib and site-packages"
for a in sm90 sm100 sm103 sm120 sm121; do
  $FA --arch $a --dir "$SITE/torch/lib" --json > "$R/audit-torch-$a.json"; echo "torch $a rc=$?"
  $FA --arch $a --dir "$SITE" --json > "$R/audit-site-$a.json"; echo "site $a rc=$?"
done
$FA --arch sm120 --dir "$SITE" --markdown > "$R/audit-site-sm120.md"; cat "$R/audit-site-sm120.md"
echo "=== bench"
python3 bench/audit.py --dir "$SITE" --arch sm90 --rounds 3 --baseline-first | tee "$R/bench-site.json"
python3 bench/audit.py --dir "$SITE/torch/lib" --arch sm90 --rounds 3 --baseline-first | tee "$R/bench-torchlib.json"
tar czf "$OUT/run3.tgz" -C "$OUT" run3
