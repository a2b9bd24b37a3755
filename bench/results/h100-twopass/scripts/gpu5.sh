#!/bin/bash
# Call 5 (twopass with its weights in 16-byte loads): verified again, then every candidate of both families
# timed on the suite's two fp16 layers beside PyTorch, the suite's rows benched (DB from the shipped winners),
# and random seed 59 benched again on the DB of call 4 (only twopass's changed sources are measured anew).
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
timeout 150 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_gpu_dwsep_conv_fwd.py -k twopass > $OUT/gpu_twopass.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_twopass.log
for spec in "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1" "N=64,C=64,K=128,input=112x112,filter=3x3,pad=1"; do
  timeout 100 python3 scripts/time_instances.py dwsep_conv_fwd NHWGC fp16 "$spec" --per-family --show 4 >> $OUT/per_family.log 2>&1
done
timeout 60 python3 scripts/time_instances.py dwsep_conv_fwd NGCHW bf16 "N=4,C=312,K=312,input=12x12,filter=7x7,pad=3,act_pw=relu" --per-family --show 4 >> $OUT/per_family.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/per_family.log
KF db import shipped/sm_90.json --db $OUT/suite.db > /dev/null 2>&1
timeout 120 bash -c "$(declare -f KF); KF bench --ops dwsep_conv_fwd --reps 30 --db $OUT/suite.db --out $OUT/bench_suite" > $OUT/bench_suite.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_suite.log
gunzip -c build/s57/random59.db.gz > $OUT/random.db
timeout 200 bash -c "$(declare -f KF); KF bench --random 24 --seed 59 --ops dwsep_conv_fwd --dtypes fp16,bf16 --reps 20 --db $OUT/random.db --out $OUT/bench_random" > $OUT/bench_random.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_random.log
python3 build/s57/family_best.py $OUT/random.db > $OUT/family_best_random.txt 2>&1
python3 build/s57/family_best.py $OUT/suite.db 2>&1 | grep -A4 "^dwsep_conv_fwd:nhwgc:.*:2d:N=64,C=\(1024\|64\),K=\(1024\|128\),input=\(7x7\|112x112\)," > $OUT/family_best_suite.txt
rm -f $OUT/suite.db; gzip -f $OUT/random.db
cd $OUT && tar czf benches.tgz bench_suite bench_random && rm -rf bench_suite bench_random
