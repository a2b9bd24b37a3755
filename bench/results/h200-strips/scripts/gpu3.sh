#!/bin/bash
# Call 3 (H200): a second random draw (seed 60, 24 16-bit dwsep layers) tuned in full, PyTorch in the same run,
# for the prior's regret on layers it was not fitted on; then the shipped H100 winners re-timed on this GPU
# (`db verify --shipped`) for as long as the call allows.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
timeout 280 bash -c "$(declare -f KF); KFACTORY_SHIPPED=off KF bench --random 24 --seed 60 --ops dwsep_conv_fwd --dtypes fp16,bf16 --reps 20 --db $OUT/random60.db --out $OUT/bench_random60" > $OUT/bench_random60.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_random60.log
python3 build/s58/strip_best.py $OUT/random60.db > $OUT/strip_best_random60.txt 2>&1
python3 build/s58/prior_check.py $OUT/random60.db > $OUT/prior_check_random60.txt 2>&1
timeout 270 bash -c "$(declare -f KF); KF db verify --shipped --db $OUT/h200_verified.db" > $OUT/verify_shipped.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/verify_shipped.log
gzip -f $OUT/random60.db $OUT/h200_verified.db $OUT/verify_shipped.log
cd $OUT && rm -f bench_random60/*.png && tar czf bench_random60.tgz bench_random60 && rm -rf bench_random60
