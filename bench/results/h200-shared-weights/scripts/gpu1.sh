#!/bin/bash
# Call 1 (H200): twopass kf_depthwise with channels-last weights in shared memory: GPU tests, A/B against
# HEAD's kernel (build/s59/old) on channels-last layers, ncu of mnv1_b1024's depthwise pass.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site build/s59/old > /dev/null 2>&1
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/device.txt 2>&1
timeout 240 python3 -m pytest -m gpu tests/test_gpu_dwsep_conv_fwd.py -k twopass -q -x > $OUT/gpu_twopass.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/gpu_twopass.log
timeout 120 python3 build/s59/ab.py > $OUT/ab_new.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_new.txt
PYTHONPATH=$PWD/build/s59/old:$PYTHONPATH timeout 120 python3 build/s59/ab.py > $OUT/ab_old.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_old.txt
timeout 60 ncu --clock-control none -k regex:"kf_depthwise" -c 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats python3 scripts/profile_one.py dwsep_conv_fwd NHWGC fp16 "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1" dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b64x128x64_p3_w4_k3x3s1x1d1x1 > $OUT/ncu_b1024.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ncu_b1024.txt
