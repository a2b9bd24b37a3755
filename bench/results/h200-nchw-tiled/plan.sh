# bench/NOTES.md §106 (run on an H200; results in run/, held141/, retune.txt): twopass's NCHW-style
# depthwise pass with its input windows copied into shared memory first (`_tl` points, added beside the direct
# ones, whose sources are unchanged). layers.txt: eleven NCHW-style layers of seeds 131, 137 and 139 (the
# depthwise-bound ones, 1-D, 3-D, a tiny one).
#   bash bench/results/h200-nchw-tiled/plan.sh verify    (one H200 call, ~6 min: GPU tests, ncu of both passes)
#   bash bench/results/h200-nchw-tiled/plan.sh current   (one H200 call, ~7 min: every twopass point, direct and
#                                                          tiled, of each layer; best of each printed)
# held141/layers.txt (seed 141's first 15 NCHW-style layers twopass serves, held out):
#   LAYERS_FILE=bench/results/h200-nchw-tiled/held141/layers.txt SHOW=200 bash scripts/twopass_before_after.sh current
# retune.txt: python3 scripts/retune_budget.py ship.db --budget 4 --op dwsep_conv_fwd --match ngchw (a DB of
#   shipped/sm_90.json), then scripts/ship_winners.py.
set -u
HERE=bench/results/h200-nchw-tiled
export LAYERS_FILE=$HERE/layers.txt SHOW=200 SPLIT=_tl_
bash scripts/twopass_before_after.sh "$@"
if [ "${1:-}" = verify ]; then  # C = 415's w2 points, direct then tiled, both launches each
  export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests KFACTORY_SHIPPED=off
  for tl in "" _tl; do
    timeout 100 ncu --clock-control none --kernel-name regex:kf_ --launch-skip 4 --launch-count 2 --section SpeedOfLight \
      --section Occupancy --section LaunchStats python3 scripts/profile_one.py dwsep_conv_fwd NGCHW fp16 \
      "$(head -1 $HERE/layers.txt | cut -d' ' -f3)" dwsep_conv_fwd_2d_ngchw_fp16_twopass_b64x128x64_p4_w2${tl}_k5x5s2x2d1x1_cpadded 2>&1 \
      | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|Dynamic Shared|DRAM Throughput"
  done
fi
