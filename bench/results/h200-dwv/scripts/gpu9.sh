#!/bin/bash
# Call 9 (H200): ncu on mnv1_dw3 (NHWGC fp16): dwv's best 2-D point (listed for this run only) beside dwl's.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
cp build/s61/dwv_2d.toml instances/conv_bwd_weight_dwv_2d.toml
sed -i 's/CELLS = frozenset((Layout.NHWGC, dtype, 1) for dtype in/CELLS = frozenset((Layout.NHWGC, dtype, n) for n in (1, 2) for dtype in/' factory/ops/conv_bwd_weight/dwv.py
python3 -m compileall -q factory .site > /dev/null 2>&1
python3 build/s61/ncu_pair.py > $OUT/plain.txt 2>&1
timeout 200 ncu --kernel-name kf_main --launch-count 2 --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
  python3 build/s61/ncu_pair.py > $OUT/ncu_mnv1_dwv_dwl.txt 2>&1
echo "rc=$?" >> $OUT/ncu_mnv1_dwv_dwl.txt
