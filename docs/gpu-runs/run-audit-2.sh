#!/bin/bash
# second audit run: libraries whose kernels live outside .nv_fatbin, per-target counts vs cuobjdump, bench again
set -u
cd "$(dirname "$0")"; [ -d src ] || cd ../..
R=$OUT/run2; mkdir -p "$R"
exec > >(tee -a "$R/run.log") 2>&1
if ! python3 -c 'import elftools' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/pyelftools-*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1
SITE=/opt/torch/.venv/lib/python3.12/site-packages
L=$SITE/nvidia/cu13/lib
echo "=== sections of libcufft"; readelf -SW $L/libcufft.so.12 | grep -v "^  \[ *[0-9]*\] \.\(rela\|gnu\|note\|dyn\|init\|fini\|plt\|got\|eh_frame\|tbss\|tdata\|comment\|debug\)" 
ls -la $L/libcufft*
echo "=== cuobjdump counts"
for lib in $L/libcufft.so.12 $L/libcublasLt.so.13 $SITE/nvidia/nccl/lib/libnccl.so.2 $SITE/nvidia/cusparselt/lib/libcusparseLt.so.0 $SITE/torch/lib/libtorch_cuda.so $SITE/torch/lib/libtorch_cuda_linalg.so $L/libcufile.so.0; do
  echo "## $(basename $lib)"
  for kind in elf ptx; do timeout 200 cuobjdump --list-$kind "$lib" 2>&1 | sed -E 's/.*\.(sm_[0-9]+[af]?)\.(cubin|ptx)$/\2 \1/' | sort | uniq -c; done
done > "$R/cuobjdump-counts.txt"
cat "$R/cuobjdump-counts.txt"
echo "=== cufft -all"; timeout 120 cuobjdump -all --list-elf $L/libcufft.so.12 2>&1 | sed -E 's/.*\.(sm_[0-9]+[af]?)\.(cubin|ptx)$/\2 \1/' | sort | uniq -c | head -30
echo "=== torch.fft on the H200"
python3 -c 'import torch; x=torch.randn(4096, device="cuda"); y=torch.fft.fft(x); torch.cuda.synchronize(); print("fft ok", y.shape, float((torch.fft.ifft(y).real-x).abs().max()))'
echo "=== audit site"
for a in sm90 sm100 sm103 sm120 sm121; do python3 -m forgepatch audit --arch $a --dir "$SITE" --json > "$R/audit-site-$a.json"; echo "audit $a rc=$?"; done
python3 -m forgepatch audit --arch sm120 --dir "$SITE/torch/lib" --markdown
echo "=== bench"
python3 bench/audit.py --dir "$SITE" --arch sm90 --rounds 3 --baseline-first | tee "$R/bench-site.json"
python3 bench/audit.py --dir "$SITE/torch/lib" --arch sm90 --rounds 3 --baseline-first | tee "$R/bench-torchlib.json"
tar czf "$OUT/run2.tgz" -C "$OUT" run2
