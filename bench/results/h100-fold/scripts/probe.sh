#!/bin/bash
# Fold probe: each 3-D problem and the 2-D problem it is in disguise, every candidate timed.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off
python3 -m compileall -q factory .site > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
run() { # op layout spec tag
  echo "=== $1 $2 $3" >> $OUT/probe.log
  timeout 120 python3 scripts/time_instances.py $1 $2 fp16 "$3" --per-family --show 3 >> $OUT/probe.log 2>&1
  echo "rc=$?" >> $OUT/probe.log
}
W=conv_bwd_weight; D=conv_bwd_data
for op in $W; do
run $op NHWGC "N=4,G=1,C=64,K=64,input=16x28x28,filter=3x1x1,stride=1x1x1,pad=1x0x0"
run $op NHWGC "N=4,G=1,C=64,K=64,input=16x784,filter=3x1,stride=1x1,pad=1x0"
run $op NHWGC "N=8,G=192,C=1,K=1,input=8x28x28,filter=3x1x1,stride=1x1x1,pad=1x0x0"
run $op NHWGC "N=8,G=192,C=1,K=1,input=8x784,filter=3x1,stride=1x1,pad=1x0"
run $op NHWGC "N=8,G=192,C=1,K=1,input=8x28x28,filter=1x3x3,stride=1x1x1,pad=0x1x1"
run $op NHWGC "N=64,G=192,C=1,K=1,input=28x28,filter=3x3,stride=1x1,pad=1x1"
run $op NGCHW "N=8,G=192,C=1,K=1,input=8x28x28,filter=3x1x1,stride=1x1x1,pad=1x0x0"
run $op NGCHW "N=8,G=192,C=1,K=1,input=8x784,filter=3x1,stride=1x1,pad=1x0"
done
run $D NHWGC "N=4,G=1,C=64,K=64,input=16x28x28,filter=3x1x1,stride=1x1x1,pad=1x0x0"
run $D NHWGC "N=4,G=1,C=64,K=64,input=16x784,filter=3x1,stride=1x1,pad=1x0"
run $D NHWGC "N=8,G=192,C=1,K=1,input=8x28x28,filter=1x3x3,stride=1x1x1,pad=0x1x1"
run $D NHWGC "N=64,G=192,C=1,K=1,input=28x28,filter=3x3,stride=1x1,pad=1x1"
run $W NHWGC "N=4,G=1,C=64,K=64,input=16x28x28,filter=1x3x3,stride=1x1x1,pad=0x1x1"
run $W NHWGC "N=64,G=1,C=64,K=64,input=28x28,filter=3x3,stride=1x1,pad=1x1"
