#!/bin/bash
# Call 3 (H200): dwv's first look: GPU test against PyTorch, then every candidate of every family timed
# on channels-last depthwise layers, PyTorch in the same run.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
start=$(date +%s)
timeout 200 python3 -m pytest -m gpu tests/test_gpu_dwv_random.py -q -x -s > $OUT/gpu_dwv.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_dwv.log
TI="python3 scripts/time_instances.py conv_bwd_weight NHWGC"
for spec in "fp16 N=64,G=256,C=1,K=1,input=28x28,filter=3x3,pad=1" \
            "bf16 N=64,G=256,C=1,K=1,input=28x28,filter=3x3,pad=1" \
            "fp16 N=64,G=72,C=1,K=1,input=56x56,filter=5x5,stride=2,pad=2" \
            "fp16 N=64,G=144,C=1,K=1,input=56x56,filter=3x3,pad=1" \
            "bf16 N=64,G=32,C=1,K=1,input=112x112,filter=3x3,pad=1" \
            "fp16 N=64,G=192,C=1,K=1,input=28x28,filter=7x7,pad=3" \
            "fp16 N=32,G=256,C=1,K=1,input=2048,filter=15,pad=7" \
            "fp32 N=64,G=576,C=1,K=1,input=14x14,filter=3x3,stride=2,pad=1"; do
  set -- $spec
  echo "=== $1 $2" >> $OUT/sweep.txt
  timeout 120 $TI $1 $2 --per-family --show 30 >> $OUT/sweep.txt 2>&1
  echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/sweep.txt
done
