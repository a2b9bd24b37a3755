# Where `_mx` kf_depthwise spends its time (bench/NOTES.md 113), one H200 call (`.whl/` carried): warp states
# and per-instruction execution counts and stall samples of the C = 288 7x7 layer's kf_depthwise (best `_mx`
# point), then both launches' durations on it and on the 5x5 C = K = 96 layer at 56x56.
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests KFACTORY_SHIPPED=off
P="python3 scripts/profile_one.py dwsep_conv_fwd NHWGC"
L7="N=64,C=288,K=224,input=33x33,filter=7x7,pad=3,bias_pw=1" I7=dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b128x128x64_p3_w1_st_mx_k7x7s1x1d1x1
L5="N=32,C=96,K=96,input=56x56,filter=5x5,pad=2" I5=dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w1_st_mx_k5x5s1x1d1x1
NCU="timeout 120 ncu --clock-control none --launch-skip 2 --launch-count 1"
$NCU --kernel-name regex:kf_depthwise --section WarpStateStats --section SchedulerStats --section Occupancy \
  $P bf16 "$L7" $I7 > $OUT/states7.txt 2>&1
$NCU --kernel-name regex:kf_depthwise --section SourceCounters --page source --print-source sass --csv \
  $P bf16 "$L7" $I7 > $OUT/sass7.csv 2>&1
for x in "bf16 $L7 $I7" "fp16 $L5 $I5"; do set -- $x
  timeout 120 ncu --clock-control none --kernel-name regex:kf_ --launch-skip 4 --launch-count 2 --section SpeedOfLight \
    $P $1 "$2" $3 2>&1 | grep -E "^  kf_|Duration|DRAM Throughput|Compute \(SM\)"
done | tee $OUT/durations.txt
