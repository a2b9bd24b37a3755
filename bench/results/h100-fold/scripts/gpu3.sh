#!/bin/bash
# Call 3: the separable 3-D suite's backward-data rows (tuned in full), then what the prior alone serves on
# every row of both ops.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
timeout 300 bash -c "$(declare -f KF); KF bench --suite bench/suites/separable_3d.toml --ops conv_bwd_data --dtypes fp16 --reps 30 --db $OUT/sep3d_d.db --out $OUT/bench_d" > $OUT/bench_d.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_d.log
python3 build/s57/family_best.py $OUT/sep3d_d.db > $OUT/family_best_d.txt 2>&1
timeout 200 bash -c "$(declare -f KF); KF bench --suite bench/suites/separable_3d.toml --dtypes fp16 --reps 30 --select heuristic --db $OUT/empty.db --out $OUT/bench_h" > $OUT/bench_h.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_h.log
gzip -f $OUT/sep3d_d.db; rm -f $OUT/empty.db
cd $OUT && tar czf bench_dh.tgz bench_d bench_h && rm -rf bench_d bench_h
