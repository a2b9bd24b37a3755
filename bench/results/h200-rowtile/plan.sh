# The first measurement of rowtile and of twopass's staged stores (H200; not yet run): every rowtile instance on
# the GPU-test problems it serves and its random problems against PyTorch, then candidates timed beside PyTorch.
set -u
# Run from the repository root with the SQLAlchemy and platformdirs wheels in .whl/ (carried).
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PART=${1:-all}  # verify | time | stores | all (each of the first three fits one call)
if [ "$PART" = verify ] || [ "$PART" = all ]; then
timeout 540 python3 -m pytest -q -m gpu tests/test_gpu_dwsep_conv_fwd.py -k "rowtile or twopass" \
  tests/test_gpu_dwsep_random.py 2>&1 | tail -8
fi
if [ "$PART" = time ] || [ "$PART" = all ]; then
T="python3 scripts/time_instances.py dwsep_conv_fwd NHWGC"
for spec in "fp16 N=64,C=64,K=128,input=112x112,filter=3x3,pad=1" \
            "bf16 N=64,C=64,K=128,input=112x112,filter=3x3,pad=1" \
            "fp16 N=64,C=32,K=64,input=112x112,filter=3x3,pad=1" \
            "bf16 N=32,C=96,K=24,input=112x112,filter=3x3,pad=1" \
            "fp16 N=64,C=144,K=24,input=56x56,filter=3x3,pad=1" \
            "fp16 N=64,C=64,K=128,input=112x112,filter=3x3,stride=2,pad=1" \
            "bf16 N=32,C=120,K=40,input=56x56,filter=5x5,pad=2" \
            "fp16 N=8,C=96,K=128,input=4096,filter=9,pad=4" \
            "bf16 N=32,C=272,K=112,input=22x22,filter=7x7,pad=3" \
            "bf16 N=16,C=352,K=352,input=22x41,filter=7x7,pad=3,bias_dw=1,bias_pw=1"; do
  set -- $spec
  echo "=== $1 $2"
  timeout 90 $T $1 "$2" --per-family --show 6 2>&1 | tail -14
done
# Where a rowtile call's time goes on mnv1_b64 (the point whose 256 strips of 4 give each thread one item).
timeout 90 ncu --clock-control none -k regex:"kf_main" -c 1 --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section WarpStateStats --section SchedulerStats --metrics dram__bytes_read.sum,dram__bytes_write.sum \
  python3 scripts/profile_one.py dwsep_conv_fwd NHWGC fp16 "N=64,C=64,K=128,input=112x112,filter=3x3,pad=1" \
  dwsep_conv_fwd_2d_nhwgc_fp16_rowtile_b128x128_w2x4_r4_c64_k3x3s1x1d1x1 > ${OUT:-.}/ncu_mnv1_b64.txt 2>&1
grep -E "Duration|DRAM Throughput|Issued Warp|Eligible Warps|Achieved Occupancy|dram__bytes" ${OUT:-.}/ncu_mnv1_b64.txt
fi
if [ "$PART" = stores ] || [ "$PART" = all ]; then
# twopass's staged stores: the best `_st_` point against the best element-store point, every twopass candidate.
for spec in "NGCHW fp16 N=16,C=96,K=144,input=45x45,filter=3x3,pad=1" \
            "NGCHW bf16 N=4,C=312,K=312,input=12x12,filter=7x7,pad=3" \
            "NGCHW fp16 N=32,C=96,K=96,input=56x56,filter=5x5,stride=2,pad=2" \
            "NHWGC fp16 N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1" \
            "NHWGC fp16 N=64,C=64,K=128,input=112x112,filter=3x3,pad=1"; do
  set -- $spec
  echo "=== twopass stores: $1 $2 $3"
  timeout 90 python3 scripts/time_instances.py dwsep_conv_fwd $1 $2 "$3" --family twopass --show 200 2>&1 |
    awk '/floor/ {print; next} / us / && /_st_/ && !s {print "  best staged: " $0; s=1} / us / && !/_st_/ && !e {print "  best element:" $0; e=1}'
done
fi
