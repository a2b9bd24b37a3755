#!/bin/bash
# Call 5 (H200): a lane's 16 bytes of positions read in two 8-byte halves where the plane is only 4-element
# whole (c16s8): the GPU test of transposing points, A/B against HEAD on every row (first 4 of each family),
# the shipped winners that transpose re-timed on the final source.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site build/s60/old > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/device.txt 2>&1
timeout 100 python3 -m pytest -m gpu tests/test_gpu_transposing_pass.py -q -s > $OUT/gpu_tests.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_tests.log
for tree in new old; do
  echo "=== $tree" >> $OUT/ab_all.txt
  if [ $tree = new ]; then P=$PYTHONPATH; else P=$PWD/build/s60/$tree:$PYTHONPATH; fi
  PYTHONPATH=$P timeout 110 python3 build/s60/ab_tr.py --all 2>&1 | grep -v "_warn\|Warn" >> $OUT/ab_all.txt
  echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_all.txt
done
KF db import shipped/sm_90.json --db $OUT/ship.db > $OUT/verify_changed.log 2>&1
timeout 220 python3 -c 'import sys; from factory.cli import main; sys.exit(main())' db verify --changed --db $OUT/ship.db >> $OUT/verify_changed.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/verify_changed.log
python3 scripts/ship_winners.py --db $OUT/ship.db --arch sm_90 --out $OUT/sm_90.json >> $OUT/verify_changed.log 2>&1
rm -f $OUT/ship.db*
