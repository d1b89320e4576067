#!/bin/bash
# Fourth audit run: the benchmark again after lowering the size up to which compressed cubins
# of fatbins lacking the arch are opened (STUB_LIMIT 32 KiB -> 8 KiB), and the site-packages
# audits to compare with run 3 (the verdicts and stub counts must not change). Expects $OUT.
set -u
cd "$(dirname "$0")"; [ -d src ] || cd ../..
R=$OUT/run4; mkdir -p "$R"
exec > >(tee -a "$R/run.log") 2>&1
if ! python3 -c 'import elftools, zstandard, lz4' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1
SITE=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
for a in sm90 sm120; do python3 -m forgepatch audit --arch $a --dir "$SITE" --json > "$R/audit-site-$a.json"; echo "site $a rc=$?"; done
python3 bench/audit.py --dir "$SITE" --arch sm90 --rounds 3 --baseline-first | tee "$R/bench-site.json"
python3 bench/audit.py --dir "$SITE" --arch sm120 --rounds 3 --baseline-first | tee "$R/bench-site-sm120.json"
tar czf "$OUT/run4.tgz" -C "$OUT" run4
