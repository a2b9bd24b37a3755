# Twopass channels-last with its depthwise pass on matrix instructions, the chunk's channels as N (`_dg` points,
# added beside the others, whose sources are unchanged; bench/NOTES.md 114). Measured and not kept: the points
# exist with diagonal.patch applied (`git apply bench/results/h200-depthwise-diagonal/diagonal.patch`, on the
# commit that added it). One H200 call each (`.whl/` carried):
#   bash bench/results/h200-depthwise-diagonal/plan.sh verify  (~5 min: every twopass instance against the numpy
#        reference, outputs poisoned; `_dg` points on 50 random channels-last shapes against PyTorch; the first
#        layers.txt layers' heuristic first 24 twopass points and every `_dg` point; ncu of `_dg`'s kf_depthwise)
#   bash bench/results/h200-depthwise-diagonal/plan.sh more    (~2 min: the same timing for layers-more.txt, and ncu
#        of kf_depthwise on the 5x5 C = 96 56x56 layer: the direct pass, `_mx` and `_dg`)
# Runs: run1/ the first kernel (one band a block, its window by loads and stores; profile.sh in full), run2/ with
# the diagonal B built a half row a thread, the pair loop unrolled and the window by cp.async, run3/ (the patch)
# with each block looping over bands, the next window copied while the warps compute (more.txt without ncu).
# layers.txt: three 5x5 (two under PyTorch in bench/NOTES.md 112), two 3x3 (mnv1_b1024 and 112x112), two stride 2;
# layers-more.txt: the 7x7, 9x9 and dilated layers `_mx` was measured on (bench/NOTES.md 111).
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
HERE=bench/results/h200-depthwise-diagonal
export SHOW=200 SPLIT=_dg_ TOP=24
case "${1:-}" in
  verify)
    timeout 240 python3 -m pytest -m gpu -q -x tests/test_gpu_dwsep_conv_fwd.py -k twopass 2>&1 | tail -3
    timeout 100 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k diagonal 2>&1 | tail -3
    mkdir -p $OUT/quick
    OUT=$OUT/quick LAYERS_FILE=$HERE/layers.txt timeout 240 bash scripts/twopass_before_after.sh current
    bash $HERE/profile.sh dg ;;
  more)
    mkdir -p $OUT/more
    OUT=$OUT/more LAYERS_FILE=$HERE/layers-more.txt timeout 420 bash scripts/twopass_before_after.sh current
    for i in dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w4_st_k5x5s1x1d1x1 \
             dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w1_st_mx_k5x5s1x1d1x1 \
             dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w1_st_dg_k5x5s1x1d1x1; do
      echo "== $i"
      timeout 50 ncu --clock-control none --kernel-name regex:kf_depthwise --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --metrics smsp__inst_executed.sum \
        python3 scripts/profile_one.py dwsep_conv_fwd NHWGC fp16 "N=32,C=96,K=96,input=56x56,filter=5x5,pad=2" "$i" \
        2>&1 | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|DRAM Throughput|Compute \(SM\) Thr|inst_executed"
    done ;;
  *) echo "usage: bash bench/results/h200-depthwise-diagonal/plan.sh verify|more" >&2; exit 2 ;;
esac
