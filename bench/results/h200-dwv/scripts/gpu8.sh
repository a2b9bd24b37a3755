#!/bin/bash
# Call 8 (H200): the shipped 1-D channels-last depthwise problems of 12-38 taps tuned again in full (every
# candidate measured afresh, dwv among them), and the shipped file rewritten from that DB.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
start=$(date +%s)
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
KF db import shipped/sm_90.json --db $OUT/ship.db > $OUT/tunes.txt 2>&1
for spec in "fp16 N=16,G=35,C=1,K=1,input=639,filter=19,pad=9" \
            "bf16 N=16,G=336,C=1,K=1,input=1196,filter=29,pad=14" \
            "fp16 N=16,G=192,C=1,K=1,input=1663,filter=38,stride=2,pad=18" \
            "fp16 N=64,G=120,C=1,K=1,input=3171,filter=15,pad=7" \
            "fp16 N=16,G=472,C=1,K=1,input=1631,filter=14,pad=6" \
            "fp16 N=64,G=164,C=1,K=1,input=1173,filter=14,pad=6" \
            "bf16_fp32w N=16,G=48,C=1,K=1,input=750,filter=13,pad=6" \
            "bf16 N=32,G=32,C=1,K=1,input=7942,filter=13,stride=2,pad=6" \
            "bf16 N=32,G=888,C=1,K=1,input=950,filter=12,pad=5"; do
  set -- $spec
  [ $(( $(date +%s) - start )) -gt 300 ] && { echo "skipped (time) $1 $2" >> $OUT/tunes.txt; continue; }
  echo "=== $1 $2" >> $OUT/tunes.txt
  timeout 45 python3 -c 'import sys; from factory.cli import main; sys.exit(main())' tune --layout NHWGC --dtype $1 --problem $2 --db $OUT/ship.db --fresh >> $OUT/tunes.txt 2>&1
  echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/tunes.txt
done
python3 scripts/ship_winners.py --db $OUT/ship.db --arch sm_90 --out $OUT/sm_90.json >> $OUT/tunes.txt 2>&1
rm -f $OUT/ship.db
