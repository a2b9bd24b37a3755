#!/bin/bash
# Call 7 (H200): the committed 1-D catalog and prior: dwv's GPU test against PyTorch.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
start=$(date +%s)
timeout 200 python3 -m pytest -m gpu tests/test_gpu_dwv_random.py -q -x -s > $OUT/gpu_dwv_1d.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_dwv_1d.log
