# Where twopass's depthwise pass spends its time on a late-stage wide-C channels-last layer (C = 672, 5x5 at
# 14x14, N = 64: every twopass point 81-90 µs whatever its GEMM tile, PyTorch's two calls 49): ncu (clocks not
# locked) on kf_depthwise and kf_main of the best point, with stall reasons and memory traffic.
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
i=dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b128x128x64_p4_w4_st_tma_k5x5s1x1d1x1
timeout 150 ncu --clock-control none --kernel-name regex:kf_ --launch-skip 4 --launch-count 2 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis \
  python3 scripts/profile_one.py dwsep_conv_fwd NHWGC bf16 "N=64,C=672,K=112,input=14x14,filter=5x5,pad=2" $i 2>&1 \
  | grep -vE "^==PROF==|^    -+|^\s*$" | head -150
