#!/bin/bash
# Call 2 (H200): A/B of kf_depthwise (HEAD's in build/s59/old vs the working tree's), host enqueue hidden;
# ncu durations of both kernels on three channels-last layers.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site build/s59/old > /dev/null 2>&1
start=$(date +%s)
PYTHONPATH=$PWD/build/s59/old:$PYTHONPATH timeout 150 python3 build/s59/ab.py > $OUT/ab_old.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_old.txt
timeout 150 python3 build/s59/ab.py > $OUT/ab_new.txt 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ab_new.txt
for spec in "fp16 N=32,C=240,K=240,input=28x28,filter=5x5,pad=2 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x64x64_p4_w8_k5x5s1x1d1x1" \
            "bf16 N=32,C=272,K=112,input=22x22,filter=7x7,pad=3 dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b128x64x64_p3_w4_k7x7s1x1d1x1" \
            "fp16 N=64,C=64,K=128,input=112x112,filter=3x3,pad=1 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x64x64_p4_w4_k3x3s1x1d1x1"; do
  set -- $spec
  timeout 60 ncu --clock-control none -k regex:"kf_(depthwise|main)" -c 2 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,launch__registers_per_thread python3 scripts/profile_one.py dwsep_conv_fwd NHWGC $1 "$2" $3 2>&1 | grep -E "kf_|duration|bytes|warps_active|inst_executed|registers|GPU time" >> $OUT/ncu_kernels.txt
done
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/ncu_kernels.txt
