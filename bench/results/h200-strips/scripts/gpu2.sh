#!/bin/bash
# Call 2 (H200): random seed 59's 24 16-bit dwsep layers tuned in full on a fresh DB (fused and twopass with
# strips 1-8), PyTorch in the same run; time per strip; ncu of mnv1_b1024's twopass winner (both kernels).
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
timeout 60 ncu --clock-control none -k regex:"kf_(depthwise|main)" -c 2 --section SpeedOfLight --section Occupancy --section LaunchStats python3 scripts/profile_one.py dwsep_conv_fwd NHWGC fp16 "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1" dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b64x128x64_p3_w4_k3x3s1x1d1x1 > $OUT/ncu_b1024.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ncu_b1024.txt
timeout 400 bash -c "$(declare -f KF); KF bench --random 24 --seed 59 --ops dwsep_conv_fwd --dtypes fp16,bf16 --reps 20 --db $OUT/random.db --out $OUT/bench_random" > $OUT/bench_random.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_random.log
python3 build/s58/strip_best.py $OUT/random.db > $OUT/strip_best_random.txt 2>&1
gzip -f $OUT/random.db
cd $OUT && rm -f bench_random/*.png && tar czf bench_random.tgz bench_random && rm -rf bench_random
