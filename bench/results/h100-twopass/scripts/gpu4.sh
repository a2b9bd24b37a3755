#!/bin/bash
# Call 4: twopass verified (every instance on the GPU test's problems, random problems against PyTorch), then
# timed: the public suite's dwsep rows (DB from the shipped winners: only the new candidates are measured)
# and a fresh random draw of 16-bit layers, every candidate of both families.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
timeout 200 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_gpu_dwsep_conv_fwd.py -k twopass > $OUT/gpu_twopass.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_twopass.log
KF db import shipped/sm_90.json --db $OUT/suite.db > /dev/null 2>&1
timeout 120 bash -c "$(declare -f KF); KF bench --ops dwsep_conv_fwd --reps 30 --db $OUT/suite.db --out $OUT/bench_suite" > $OUT/bench_suite.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_suite.log
python3 build/s57/family_best.py $OUT/suite.db 2>&1 | grep -A12 "^dwsep" > $OUT/family_best_suite.txt
timeout 230 bash -c "$(declare -f KF); KF bench --random 24 --seed 59 --ops dwsep_conv_fwd --dtypes fp16,bf16 --reps 20 --db $OUT/random.db --out $OUT/bench_random" > $OUT/bench_random.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_random.log
python3 build/s57/family_best.py $OUT/random.db > $OUT/family_best_random.txt 2>&1
rm -f $OUT/suite.db; gzip -f $OUT/random.db
cd $OUT && tar czf benches.tgz bench_suite bench_random && rm -rf bench_suite bench_random
