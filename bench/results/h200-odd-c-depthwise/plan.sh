# Prepared on branch prepared/ngchw-padded-chunk, not run yet (bench/NOTES.md §102): twopass's NCHW-style
# depthwise pass where C is not a multiple of 8 reads the last chunk's padding channels as its last real channel
# (no predicate an element; the padding's sums written as zeros), from per-channel plane pointers. layers.txt:
# five layers with C % 8 != 0 (the first two seed 131's rows below PyTorch, §101), then two with whole chunks,
# whose kernels compile to the same SASS as before.
#   bash bench/results/h200-ngchw-padded/plan.sh verify   (one H200 call, ~4.5 min: GPU tests, ncu)
#   bash bench/results/h200-ngchw-padded/plan.sh time     (one H200 call, ~5 min: before/after, shipped)
set -u
HERE=bench/results/h200-ngchw-padded
BEFORE=$HERE/before LAYERS_FILE=$HERE/layers.txt bash scripts/twopass_before_after.sh "$@"
if [ "${1:-}" = verify ]; then  # the C = 415 layer's best point, both launches
  export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests KFACTORY_SHIPPED=off
  timeout 100 ncu --clock-control none --kernel-name regex:kf_ --launch-skip 4 --launch-count 2 --section SpeedOfLight \
    --section Occupancy python3 scripts/profile_one.py dwsep_conv_fwd NGCHW fp16 "$(head -1 $HERE/layers.txt | cut -d' ' -f3)" \
    dwsep_conv_fwd_2d_ngchw_fp16_twopass_b64x128x64_p3_w2_st_k5x5s2x2d1x1_cpadded 2>&1 \
    | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|Issue Slots|DRAM Throughput"
fi
