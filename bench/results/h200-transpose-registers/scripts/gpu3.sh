#!/bin/bash
# Call 3 (H200): channels in 8-byte runs back on the shared tile: the GPU test of transposing points, A/B on
# the rows whose grad_input copy changed, the shipped winners that transpose re-timed on the final source.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site build/s60/old > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/device.txt 2>&1
timeout 100 python3 -m pytest -m gpu tests/test_gpu_transposing_pass.py -q -s > $OUT/gpu_tests.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_tests.log
timeout 60 python3 build/s60/ab_tr.py --back > $OUT/ab_back.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_back.txt
echo "=== old" >> $OUT/ab_back.txt
PYTHONPATH=$PWD/build/s60/old:$PYTHONPATH timeout 60 python3 build/s60/ab_tr.py --back >> $OUT/ab_back.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_back.txt
KF db import shipped/sm_90.json --db $OUT/ship.db > $OUT/verify_changed.log 2>&1
timeout 250 python3 -c 'import sys; from factory.cli import main; sys.exit(main())' db verify --changed --db $OUT/ship.db >> $OUT/verify_changed.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/verify_changed.log
python3 scripts/ship_winners.py --db $OUT/ship.db --arch sm_90 --out $OUT/sm_90.json >> $OUT/verify_changed.log 2>&1
rm -f $OUT/ship.db*
