# Twopass channels-last with its depthwise pass on matrix instructions (`_mx` points, added beside the others,
# whose sources are unchanged; bench/NOTES.md 111), prepared on branch prepared/depthwise-on-matrix-instructions.
# One H200 call each (`.whl/` carried):
#   bash bench/results/h200-depthwise-matrix/plan.sh verify   (~4.5 min: every twopass instance against the numpy
#        reference, outputs poisoned; `_mx` points on 50 random channels-last shapes against PyTorch; ncu of
#        kf_depthwise, `_mx` against the direct pass, on the C = 288 7x7 layer)
#   bash bench/results/h200-depthwise-matrix/plan.sh quick    (~2 min: the heuristic's first 24 twopass points of
#        each of the five layers in layers.txt and every `_mx` point; the best `_mx` point against the best other)
#   bash bench/results/h200-depthwise-matrix/plan.sh current  (~7 min: the same with every twopass point)
# layers.txt: two 7x7 layers at 33x33 and 48x48 (seeds 143 and 145), a 7x7 at 56x56, mnv1_b1024, a 3x3 at 112x112.
set -u
export LAYERS_FILE=bench/results/h200-depthwise-matrix/layers.txt SHOW=200 SPLIT=_mx_
case "${1:-}" in
  verify)
    python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
    export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests KFACTORY_SHIPPED=off
    timeout 240 python3 -m pytest -m gpu -q -x tests/test_gpu_dwsep_conv_fwd.py -k twopass 2>&1 | tail -3
    timeout 90 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k matrix 2>&1 | tail -3
    for i in dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b128x128x64_p3_w4_st_k7x7s1x1d1x1 \
             dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b128x128x64_p3_w1_st_mx_k7x7s1x1d1x1; do
      echo "== $i"
      timeout 60 ncu --clock-control none --kernel-name regex:kf_depthwise --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --metrics smsp__inst_executed.sum,lts__t_sectors_srcunit_tex_op_read.sum \
        python3 scripts/profile_one.py dwsep_conv_fwd NHWGC bf16 "N=64,C=288,K=224,input=33x33,filter=7x7,pad=3,bias_pw=1" "$i" \
        2>&1 | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|DRAM Throughput|Compute \(SM\) Thr|inst_executed|lts__t"
    done ;;
  quick) TOP=24 timeout 300 bash scripts/twopass_before_after.sh current ;;
  current) timeout 560 bash scripts/twopass_before_after.sh current ;;
  *) echo "usage: bash bench/results/h200-depthwise-matrix/plan.sh verify|quick|current" >&2; exit 2 ;;
esac
