# Where mnv1_b1024's `_tma` winner spends its time: ncu (clocks not locked) on both launches of one call, beside
# the threads'-copies point it replaced.
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
for i in dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b64x128x64_p3_w2_st_tma_k3x3s1x1d1x1 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b64x128x64_p3_w2_st_k3x3s1x1d1x1; do
  echo "=== $i"
  timeout 200 ncu --clock-control none --kernel-name regex:kf_ --launch-skip 10 --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    python3 scripts/profile_one.py dwsep_conv_fwd NHWGC fp16 "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1" $i 2>&1 \
    | grep -E "^  kf_|Duration|Throughput|Registers Per|Achieved Occ|Theoretical Occ|Block Size|Grid Size|Waves"
done
