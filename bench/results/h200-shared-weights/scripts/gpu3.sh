#!/bin/bash
# Call 3 (H200): twopass kf_depthwise, channels-last weights in shared memory and blocks looping over strips:
# GPU tests; A/B against HEAD's kernel (build/s59/old); the shipped dwsep winners whose source changed re-timed.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site build/s59/old > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
timeout 200 python3 -m pytest -m gpu tests/test_gpu_dwsep_conv_fwd.py -k twopass -q > $OUT/gpu_twopass.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_twopass.log
timeout 130 python3 build/s59/ab.py > $OUT/ab_new.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_new.txt
PYTHONPATH=$PWD/build/s59/old:$PYTHONPATH timeout 130 python3 build/s59/ab.py > $OUT/ab_old.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_old.txt
KF db import shipped/sm_90.json --db $OUT/ship.db > $OUT/verify_changed.log 2>&1
timeout 150 python3 -c 'import sys; from factory.cli import main; sys.exit(main())' db verify --changed --op dwsep_conv_fwd --db $OUT/ship.db >> $OUT/verify_changed.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/verify_changed.log
python3 scripts/ship_winners.py --db $OUT/ship.db --arch sm_90 --out $OUT/sm_90.json >> $OUT/verify_changed.log 2>&1
rm -f $OUT/ship.db*
