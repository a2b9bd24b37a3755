# `_mx2`: twopass's channels-last matrix depthwise pass over bands of two tiles of 16 output rows, each warp taking
# them in turn (B's fragments built and the window's halo rows copied once for both; bench/NOTES.md 115). New
# points beside the `_mx` ones, whose sources are unchanged. Measured and not kept: the points exist with
# matrix-row-tiles.patch applied (`git apply`, on the commit that added it). One H200 call (~6 min), `.whl/` carried:
#   bash bench/results/h200-matrix-row-tiles/plan.sh
# every twopass instance against the numpy reference (outputs poisoned); the `_mx` and `_mx2` points on 50 random
# channels-last shapes against PyTorch; each layers.txt layer's heuristic first 24 twopass points and every `_mx2`
# one (quick/); ncu of kf_depthwise, `_mx` against `_mx2`, on the C = 288 7x7 layer.
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
HERE=bench/results/h200-matrix-row-tiles
timeout 200 python3 -m pytest -m gpu -q -x tests/test_gpu_dwsep_conv_fwd.py -k twopass 2>&1 | tail -2
timeout 60 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k matrix 2>&1 | tail -3
mkdir -p $OUT/quick
OUT=$OUT/quick SHOW=200 SPLIT=_mx2_ TOP=24 LAYERS_FILE=$HERE/layers.txt timeout 150 bash scripts/twopass_before_after.sh current
for i in dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b128x128x64_p3_w1_st_mx_k7x7s1x1d1x1 \
         dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b128x128x64_p3_w1_st_mx2_k7x7s1x1d1x1; do
  echo "== $i"
  timeout 40 ncu --clock-control none --kernel-name regex:kf_depthwise --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --metrics smsp__inst_executed.sum \
    python3 scripts/profile_one.py dwsep_conv_fwd NHWGC bf16 "N=64,C=288,K=224,input=33x33,filter=7x7,pad=3,bias_pw=1" "$i" \
    2>&1 | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|Compute \(SM\) Thr|inst_executed"
done
