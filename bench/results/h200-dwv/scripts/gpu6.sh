#!/bin/bash
# Call 6 (H200): long 1-D depthwise filters, every candidate of every family, PyTorch in the same run.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
start=$(date +%s)
TI="python3 scripts/time_instances.py conv_bwd_weight NHWGC"
for spec in "fp16 N=32,G=256,C=1,K=1,input=2048,filter=31,pad=15" \
            "bf16 N=32,G=256,C=1,K=1,input=2048,filter=51,pad=25" \
            "fp16 N=16,G=384,C=1,K=1,input=1500,filter=64,pad=31" \
            "fp32 N=8,G=512,C=1,K=1,input=4000,filter=25,pad=12"; do
  set -- $spec
  echo "=== $1 $2" >> $OUT/long1d.txt
  timeout 90 $TI $1 $2 --per-family --show 6 >> $OUT/long1d.txt 2>&1
  echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/long1d.txt
done
