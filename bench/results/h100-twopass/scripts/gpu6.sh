#!/bin/bash
# Call 6: twopass's NCHW-style sources (weights read at each use again) verified and timed; what the prior
# alone serves on seed 59; where mnv1_b1024's twopass call spends its time (ncu, both kernels).
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
timeout 150 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_gpu_dwsep_conv_fwd.py -k twopass > $OUT/gpu_twopass.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_twopass.log
gunzip -c build/s57/random59_call5.db.gz > $OUT/random.db
timeout 150 bash -c "$(declare -f KF); KF bench --random 24 --seed 59 --ops dwsep_conv_fwd --dtypes fp16,bf16 --reps 20 --db $OUT/random.db --out $OUT/bench_random" > $OUT/bench_random.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_random.log
timeout 60 bash -c "$(declare -f KF); KF bench --random 24 --seed 59 --ops dwsep_conv_fwd --dtypes fp16,bf16 --reps 20 --select heuristic --db $OUT/empty.db --out $OUT/bench_heuristic" > $OUT/bench_heuristic.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_heuristic.log
timeout 60 ncu -k regex:"kf_(depthwise|main)" -c 2 --section SpeedOfLight python3 scripts/profile_one.py dwsep_conv_fwd NHWGC fp16 "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1" dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b64x128x64_p3_k3x3s1x1d1x1 > $OUT/ncu_b1024.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ncu_b1024.txt
python3 build/s57/family_best.py $OUT/random.db > $OUT/family_best_random.txt 2>&1
rm -f $OUT/empty.db; gzip -f $OUT/random.db
cd $OUT && tar czf benches.tgz bench_random bench_heuristic && rm -rf bench_random bench_heuristic
