#!/bin/bash
# Call 1 (H200): every twopass instance (strips 1, 2, 4, 8) on the GPU test's problems and 100 random draws;
# the suite's dwsep rows tuned in full on a fresh DB with PyTorch in the same run; time per strip.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/device.txt 2>&1
start=$(date +%s)
timeout 250 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_gpu_dwsep_conv_fwd.py -k twopass > $OUT/gpu_twopass.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_twopass.log
timeout 250 bash -c "$(declare -f KF); KF bench --ops dwsep_conv_fwd --reps 30 --db $OUT/suite.db --out $OUT/bench_suite" > $OUT/bench_suite.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_suite.log
python3 build/s58/strip_best.py $OUT/suite.db > $OUT/strip_best_suite.txt 2>&1
gzip -f $OUT/suite.db
cd $OUT && rm -f bench_suite/*.png && tar czf bench_suite.tgz bench_suite && rm -rf bench_suite
