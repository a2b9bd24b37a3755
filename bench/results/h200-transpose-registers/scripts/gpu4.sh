#!/bin/bash
# Call 4 (H200): positions in 8-byte runs (c16s8) against the shared tile on planes of 196-12100 positions,
# and a variant with 2 lanes along channels by 16 along positions (build/s60/var).
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site build/s60/old build/s60/var > /dev/null 2>&1
start=$(date +%s)
for tree in new old var; do
  echo "=== $tree" >> $OUT/ab_s8.txt
  if [ $tree = new ]; then P=$PYTHONPATH; else P=$PWD/build/s60/$tree:$PYTHONPATH; fi
  PYTHONPATH=$P timeout 80 python3 build/s60/ab_tr.py --s8 2>&1 | grep -v "_warn\|Warn" >> $OUT/ab_s8.txt
  echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_s8.txt
done
