# Where the fused forward's slowest rows against their roofline spend their time (bench/NOTES.md 107, "Left"):
# ncu of both twopass launches of three winners, one H200 call (~2 min), `.whl/` carried:
#   bash bench/results/h200-profile-next/plan.sh
# - mnv1_b1024 fp16 (the suite's row under PyTorch; shipped winner, 28.4 µs);
# - channels-last bf16 C = 288, K = 224 at 33x33 7x7 (seed 143's one row under 1.7x PyTorch: 183 µs, 9 % of its
#   roofline);
# - NCHW-style bf16 C = 264, K = 64 at 72x72 5x5 (seed 143, a tiled point: 264 µs, 9.7 % of its roofline).
# Per launch: duration, registers, occupancy, DRAM and SM throughput, and the warp stall reasons (run once:
# profile.txt, without the stall reasons; bench/NOTES.md 110).
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests KFACTORY_SHIPPED=off
# The stall reasons as cycles a warp spends stalled on each, per issued instruction (WarpStateStats alone prints
# only hints; the run in profile.txt has none).
STALLS=$(for r in long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait barrier not_selected lg_throttle; do
  printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' $r; done)
STALLS=${STALLS%,}
while read -r layout dtype spec instance; do
  echo "=== $layout $dtype $spec $instance"
  timeout 100 ncu --clock-control none --kernel-name regex:kf_ --launch-skip 4 --launch-count 2 --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section WarpStateStats --metrics "$STALLS" \
    python3 scripts/profile_one.py dwsep_conv_fwd "$layout" "$dtype" "$spec" "$instance" 2>&1 \
    | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|Theoretical Occ|DRAM Throughput|Compute \(SM\) Thr|Warp Cycles Per Issued|stalled|Dynamic Shared"
done << 'LAYERS'
NHWGC fp16 N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b64x128x64_p3_w2_st_tma_k3x3s1x1d1x1
NHWGC bf16 N=64,C=288,K=224,input=33x33,filter=7x7,pad=3,bias_pw=1 dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b128x128x64_p3_w4_st_k7x7s1x1d1x1
NGCHW bf16 N=32,C=264,K=64,input=72x72,filter=5x5,pad=2,act_dw=relu6,act_pw=relu6 dwsep_conv_fwd_2d_ngchw_bf16_twopass_b64x128x64_p3_w4_st_tl_k5x5s1x1d1x1
LAYERS
