#!/bin/bash
# Call 4 (H200): dwv with a period's loads in flight while the one before is summed: GPU test, then
# every dwv candidate timed (every family on mnv1_dw3), PyTorch in the same run.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
start=$(date +%s)
TI="python3 scripts/time_instances.py conv_bwd_weight NHWGC"
timeout 100 $TI fp16 N=64,G=256,C=1,K=1,input=28x28,filter=3x3,pad=1 --per-family --show 8 > $OUT/sweep.txt 2>&1
for spec in "bf16 N=64,G=256,C=1,K=1,input=28x28,filter=3x3,pad=1" \
            "fp16 N=64,G=72,C=1,K=1,input=56x56,filter=5x5,stride=2,pad=2" \
            "fp16 N=64,G=144,C=1,K=1,input=56x56,filter=3x3,pad=1" \
            "bf16 N=64,G=32,C=1,K=1,input=112x112,filter=3x3,pad=1" \
            "fp16 N=32,G=256,C=1,K=1,input=2048,filter=15,pad=7" \
            "fp32 N=64,G=576,C=1,K=1,input=14x14,filter=3x3,stride=2,pad=1"; do
  set -- $spec
  echo "=== $1 $2" >> $OUT/sweep.txt
  timeout 60 $TI $1 $2 --family dwv --show 5 >> $OUT/sweep.txt 2>&1
  echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/sweep.txt
done
timeout 150 python3 -m pytest -m gpu tests/test_gpu_dwv_random.py -q -x -s > $OUT/gpu_dwv.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_dwv.log
