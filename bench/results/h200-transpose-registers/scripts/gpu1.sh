#!/bin/bash
# Call 1 (H200): the transposing pass in registers: GPU test of transposing points on random NGCHW problems,
# A/B against HEAD's pass (build/s60/old) on the suite's NGCHW rows, PyTorch in the same run.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site build/s60/old > /dev/null 2>&1
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/device.txt 2>&1
timeout 200 python3 -m pytest -m gpu tests/test_gpu_transposing_pass.py -q -x -s > $OUT/gpu_transposing.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_transposing.log
timeout 150 python3 build/s60/ab_tr.py > $OUT/ab_new.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_new.txt
PYTHONPATH=$PWD/build/s60/old:$PYTHONPATH timeout 150 python3 build/s60/ab_tr.py > $OUT/ab_old.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_old.txt
