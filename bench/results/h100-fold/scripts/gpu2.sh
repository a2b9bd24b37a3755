#!/bin/bash
# Call 2: the folded random test against PyTorch, then the separable 3-D suite's backward-weight rows.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
timeout 200 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_gpu_folded_random.py > $OUT/gpu_folded.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_folded.log
timeout 340 bash -c "$(declare -f KF); KF bench --suite bench/suites/separable_3d.toml --ops conv_bwd_weight --dtypes fp16 --reps 30 --db $OUT/sep3d_w.db --out $OUT/bench_w" > $OUT/bench_w.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_w.log
python3 build/s57/family_best.py $OUT/sep3d_w.db > $OUT/family_best_w.txt 2>&1
gzip -f $OUT/sep3d_w.db
cd $OUT && tar czf bench_w.tgz bench_w && rm -rf bench_w
