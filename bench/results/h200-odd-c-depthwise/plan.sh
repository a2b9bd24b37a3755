# twopass's depthwise pass where C is not a multiple of 8 (bench/NOTES.md §102, §103), both layouts: NCHW-style
# reads the last chunk's padding channels as its last real channel from per-channel plane pointers; channels-last
# copies the input to rows of whole chunks (kf_pad_input) and reads the copy 16 bytes a chunk. layers.txt: five
# NCHW-style and six channels-last layers with C % 8 != 0 (seed 131's rows below PyTorch among them; 3-D; a tiny
# one, where channels-last's extra launch costs most).
#   bash bench/results/h200-odd-c-depthwise/plan.sh verify  (one H200 call, ~6 min: GPU tests, ncu, shipped winners)
#   bash bench/results/h200-odd-c-depthwise/plan.sh layers  (one H200 call, ~7 min: every twopass point before/after)
set -u
HERE=bench/results/h200-odd-c-depthwise
export BEFORE=$HERE/before LAYERS_FILE=$HERE/layers.txt
bash scripts/twopass_before_after.sh "$@"
if [ "${1:-}" = verify ]; then  # the C = 415 layer's best point, both launches; then the shipped winners
  export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests KFACTORY_SHIPPED=off
  timeout 100 ncu --clock-control none --kernel-name regex:kf_ --launch-skip 4 --launch-count 2 --section SpeedOfLight \
    --section Occupancy python3 scripts/profile_one.py dwsep_conv_fwd NGCHW fp16 "$(head -1 $LAYERS_FILE | cut -d' ' -f3)" \
    dwsep_conv_fwd_2d_ngchw_fp16_twopass_b64x128x64_p3_w2_st_k5x5s2x2d1x1_cpadded 2>&1 \
    | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|Issue Slots|DRAM Throughput"
  bash scripts/twopass_before_after.sh shipped
fi
