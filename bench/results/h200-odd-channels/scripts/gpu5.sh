#!/bin/bash
# Call 5 (H200): twopass for C not a multiple of 8 (`_cpadded` instances: padded workspace rows, padded
# pointwise weights): GPU tests (odd C among them), the shipped twopass winners re-timed on the new source,
# then each family's best against PyTorch on odd-C layers.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
timeout 180 python3 -m pytest -m gpu tests/test_gpu_dwsep_conv_fwd.py -k twopass -q > $OUT/gpu_twopass.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_twopass.log
KF db import shipped/sm_90.json --db $OUT/ship.db > $OUT/verify_changed.log 2>&1
timeout 100 python3 -c 'import sys; from factory.cli import main; sys.exit(main())' db verify --changed --op dwsep_conv_fwd --db $OUT/ship.db >> $OUT/verify_changed.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/verify_changed.log
python3 scripts/ship_winners.py --db $OUT/ship.db --arch sm_90 --out $OUT/sm_90.json >> $OUT/verify_changed.log 2>&1
rm -f $OUT/ship.db*
timeout 100 python3 build/s59/ab_odd.py > $OUT/ab_odd.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_odd.txt
