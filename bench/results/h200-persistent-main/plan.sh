# twopass kf_main with persistent blocks (`_pt`, channels-last; bench/NOTES.md 116): each block takes every
# gridDim.x-th tile with one ring of stages across them, new points beside the others (whose sources are
# unchanged). Prepared, not yet run on a GPU: apply persistent-main.patch first (`git apply`, on the commit that
# added it). One H200 call each (`.whl/` carried):
#   bash bench/results/h200-persistent-main/plan.sh verify  (~4 min: every twopass instance against the numpy
#        reference, outputs poisoned; `_pt` points on 50 random channels-last shapes against PyTorch; ncu of kf_main,
#        the best other point's against `_pt`'s, on the 5x5 C = K = 96 and the 7x7 C = 288 layers)
#   bash bench/results/h200-persistent-main/plan.sh quick   (~2 min: each layers.txt layer's heuristic first 24
#        twopass points and every `_pt` one; the best `_pt` point against the best other)
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
HERE=bench/results/h200-persistent-main
case "${1:-}" in
  verify)
    timeout 220 python3 -m pytest -m gpu -q -x tests/test_gpu_dwsep_conv_fwd.py -k twopass 2>&1 | tail -2
    timeout 60 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k persistent 2>&1 | tail -3
    while read -r dtype spec instance; do
      echo "== $spec $instance"
      timeout 40 ncu --clock-control none --kernel-name regex:kf_main --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --metrics smsp__inst_executed.sum \
        python3 scripts/profile_one.py dwsep_conv_fwd NHWGC "$dtype" "$spec" "$instance" \
        2>&1 | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|DRAM Throughput|Compute \(SM\) Thr|inst_executed"
    done << 'RUNS'
fp16 N=32,C=96,K=96,input=56x56,filter=5x5,pad=2 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b128x128x64_p3_w1_st_mx_k5x5s1x1d1x1
fp16 N=32,C=96,K=96,input=56x56,filter=5x5,pad=2 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b64x128x64_p3_w1_pt_mx_k5x5s1x1d1x1
fp16 N=32,C=96,K=96,input=56x56,filter=5x5,pad=2 dwsep_conv_fwd_2d_nhwgc_fp16_twopass_b64x128x64_p4_w1_pt_mx_k5x5s1x1d1x1
bf16 N=64,C=288,K=224,input=33x33,filter=7x7,pad=3,bias_pw=1 dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b128x128x64_p3_w1_st_mx_k7x7s1x1d1x1
bf16 N=64,C=288,K=224,input=33x33,filter=7x7,pad=3,bias_pw=1 dwsep_conv_fwd_2d_nhwgc_bf16_twopass_b64x128x64_p4_w1_pt_mx_k7x7s1x1d1x1
RUNS
    ;;
  quick)
    mkdir -p $OUT/quick
    OUT=$OUT/quick SHOW=200 SPLIT=_pt_ TOP=24 LAYERS_FILE=$HERE/layers.txt timeout 200 bash scripts/twopass_before_after.sh current ;;
  *) echo "usage: bash bench/results/h200-persistent-main/plan.sh verify|quick" >&2; exit 2 ;;
esac
