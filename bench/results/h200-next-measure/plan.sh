# The two prepared twopass changes together (bench/NOTES.md 116 `_pt`, 117 `_mxc4`), new points beside the others
# (whose sources are unchanged): apply persistent-and-narrow.patch first (`git apply`, on the commit that added
# it). One H200 call each (`.whl/` carried):
#   bash bench/results/h200-next-measure/plan.sh verify  (~5 min: every twopass instance against the numpy reference,
#        outputs poisoned; the `_pt` and the `_mx`/`_mxc4` points on 50 random channels-last shapes each against
#        PyTorch; ncu of kf_main (`_pt` against the best other) and of kf_depthwise (`_mxc4` against `_mx`))
#   bash bench/results/h200-next-measure/plan.sh quick   (~2 min: each layers.txt layer's heuristic first 24 twopass
#        points and every `_pt` and `_mxc4` one; each kind's best point against the best without it)
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
HERE=bench/results/h200-next-measure
case "${1:-}" in
  verify)
    timeout 220 python3 -m pytest -m gpu -q -x tests/test_gpu_dwsep_conv_fwd.py -k twopass 2>&1 | tail -2
    timeout 90 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k "persistent or matrix" 2>&1 | tail -4
    while read -r kernel dtype spec instance; do
      echo "== $kernel $spec $instance"
      timeout 40 ncu --clock-control none --kernel-name "regex:$kernel" --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --metrics smsp__inst_executed.sum \
        python3 scripts/profile_one.py dwsep_conv_fwd NHWGC "$dtype" "$spec" "$instance" \
        2>&1 | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|DRAM Throughput|Compute \(SM\) Thr|inst_executed"
    done << 'RUNS'
kf_main fp16 N=32,C=96,K=96,input=56x56,filter=5x5,pad=2 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w1_st_mx_k5x5s1x1d1x1
kf_main fp16 N=32,C=96,K=96,input=56x56,filter=5x5,pad=2 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b64x128x64_p4_w1_pt_mx_k5x5s1x1d1x1
kf_main bf16 N=64,C=288,K=224,input=33x33,filter=7x7,pad=3,bias_pw=1 dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b64x128x64_p4_w1_pt_mx_k7x7s1x1d1x1
kf_depthwise fp16 N=32,C=96,K=96,input=56x56,filter=5x5,pad=2 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w1_st_mxc4_k5x5s1x1d1x1
kf_depthwise bf16 N=64,C=288,K=224,input=33x33,filter=7x7,pad=3,bias_pw=1 dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b128x128x64_p3_w1_st_mxc4_k7x7s1x1d1x1
RUNS
    ;;
  quick)
    mkdir -p $OUT/quick
    OUT=$OUT/quick SHOW=200 SPLIT='_pt_|_mxc4_' TOP=24 LAYERS_FILE=$HERE/layers.txt timeout 220 bash scripts/twopass_before_after.sh current
    for kind in _pt_ _mxc4_; do python3 scripts/best_split.py $OUT/quick/after.txt $kind; done ;;
  *) echo "usage: bash bench/results/h200-next-measure/plan.sh verify|quick" >&2; exit 2 ;;
esac
