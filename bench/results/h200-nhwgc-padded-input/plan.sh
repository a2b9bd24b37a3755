# Prepared on branch prepared/nhwgc-padded-input, not run yet (bench/NOTES.md §103): twopass, channels-last where C
# is not a multiple of 8, copies the input to rows of whole chunks in a launch of its own (kf_pad_input) and reads
# the copy 16 bytes a chunk. layers.txt: six layers with C % 8 != 0 (two of seed 131's; a 3-D one; a tiny one,
# where the extra launch costs most), then one with whole chunks, whose kernels are unchanged.
#   bash bench/results/h200-nhwgc-padded-input/plan.sh verify   (one H200 call, ~4.5 min: GPU tests)
#   bash bench/results/h200-nhwgc-padded-input/plan.sh time     (one H200 call, ~5 min: before/after, shipped)
set -u
HERE=bench/results/h200-nhwgc-padded-input
BEFORE=$HERE/before LAYERS_FILE=$HERE/layers.txt bash scripts/twopass_before_after.sh "$@"
