# ncu of kf_depthwise: the direct pass, `_mx` and `_dg` on the 5x5 C = 96 56x56 layer, the direct pass and `_dg` on
# the 3x3 stride-2 C = 96 112x112 one: duration, instructions, occupancy, throughputs and warp stall reasons (cycles
# stalled per issued instruction), with diagonal.patch applied. One H200 call (~1 min), `.whl/` carried:
#   bash bench/results/h200-depthwise-diagonal/profile.sh [dg]   (dg: the `_dg` points only)
set -u
ONLY=${1:-}
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests KFACTORY_SHIPPED=off
STALLS=$(for r in long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait barrier not_selected lg_throttle; do
  printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' $r; done)
STALLS=${STALLS}smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
while read -r layout dtype spec instance; do
  case "$ONLY:$instance" in dg:*_dg_* | :*) ;; *) continue ;; esac
  echo "=== $layout $dtype $spec $instance"
  timeout 60 ncu --clock-control none --kernel-name regex:kf_depthwise --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section Occupancy --section LaunchStats --metrics "$STALLS" \
    python3 scripts/profile_one.py dwsep_conv_fwd "$layout" "$dtype" "$spec" "$instance" 2>&1 \
    | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|Theoretical Occ|DRAM Throughput|Compute \(SM\) Thr|stalled|inst_executed|wavefronts|conflicts|Dynamic Shared|Block Limit"
done << 'LAYERS'
NHWGC fp16 N=32,C=96,K=96,input=56x56,filter=5x5,pad=2 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w4_st_k5x5s1x1d1x1
NHWGC fp16 N=32,C=96,K=96,input=56x56,filter=5x5,pad=2 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w1_st_mx_k5x5s1x1d1x1
NHWGC fp16 N=32,C=96,K=96,input=56x56,filter=5x5,pad=2 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w1_st_dg_k5x5s1x1d1x1
NHWGC fp16 N=32,C=96,K=24,input=112x112,filter=3x3,stride=2,pad=1 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w1_st_k3x3s2x2d1x1
NHWGC fp16 N=32,C=96,K=24,input=112x112,filter=3x3,stride=2,pad=1 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w1_st_dg_k3x3s2x2d1x1
LAYERS
