#!/bin/bash
# Call 2 (H200): the pass in registers with 16- and 8-byte runs each way (kf_to_channels_last_c*s*): GPU tests,
# A/B against HEAD (build/s60/old) with each launch timed, the shipped winners that transpose re-timed.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site build/s60/old > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
timeout 150 python3 -m pytest -m gpu tests/test_gpu_transposing_pass.py tests/test_gpu_gwl_random.py tests/test_gpu_gwl_bwd_data_random.py -q -s > $OUT/gpu_tests.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_tests.log
timeout 120 python3 build/s60/ab_tr.py > $OUT/ab_new.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_new.txt
PYTHONPATH=$PWD/build/s60/old:$PYTHONPATH timeout 100 python3 build/s60/ab_tr.py > $OUT/ab_old.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_old.txt
KF db import shipped/sm_90.json --db $OUT/ship.db > $OUT/verify_changed.log 2>&1
timeout 150 python3 -c 'import sys; from factory.cli import main; sys.exit(main())' db verify --changed --db $OUT/ship.db >> $OUT/verify_changed.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/verify_changed.log
python3 scripts/ship_winners.py --db $OUT/ship.db --arch sm_90 --out $OUT/sm_90.json >> $OUT/verify_changed.log 2>&1
rm -f $OUT/ship.db*
