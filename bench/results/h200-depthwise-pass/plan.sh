# twopass's kf_depthwise with fewer instructions a strip (bench/NOTES.md 99; §100 ran it with
# BEFORE=bench/results/h200-depthwise-pass/predicated/before): the GPU tests and ncu, then every twopass point of
# the ten layers in layers.txt before and after, then the shipped twopass winners timed again.
#   bash bench/results/h200-depthwise-pass/plan.sh verify   (one H200 call, ~5 min: GPU tests, ncu)
#   bash bench/results/h200-depthwise-pass/plan.sh time     (one H200 call, ~6 min: before/after, shipped)
set -u
HERE=bench/results/h200-depthwise-pass
export BEFORE=${BEFORE:-$HERE/before} LAYERS_FILE=$HERE/layers.txt
bash scripts/twopass_before_after.sh "$@"
if [ "${1:-}" = verify ]; then
  bash $HERE/ncu.sh 2>&1 | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|Theoretical Occ|Issue Slots|L1TEX|Throughput" | head -30
fi
