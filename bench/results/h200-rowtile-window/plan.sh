# The first measurement of rowtile's window points (`_win`; H200): verify, then time every rowtile
# point (window and not) beside PyTorch on the layers where rowtile was latency-bound, with an ncu look.
set -u
# Run from the repository root with the SQLAlchemy and platformdirs wheels in .whl/ (carried).
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PART=${1:-all}  # verify | time | all (each fits one call)
if [ "$PART" = verify ] || [ "$PART" = all ]; then
timeout 400 python3 -m pytest -q -m gpu tests/test_gpu_dwsep_conv_fwd.py -k rowtile \
  tests/test_gpu_dwsep_random.py::test_rowtile_window_points_match_pytorch_on_random_shapes 2>&1 | tail -8
fi
if [ "$PART" = time ] || [ "$PART" = all ]; then
for spec in "fp16 N=64,C=64,K=128,input=112x112,filter=3x3,pad=1" \
            "bf16 N=64,C=64,K=128,input=112x112,filter=3x3,pad=1" \
            "fp16 N=64,C=32,K=64,input=112x112,filter=3x3,pad=1" \
            "fp16 N=64,C=80,K=40,input=106x106,filter=3x3,pad=1" \
            "fp16 N=128,C=32,K=112,input=42x54,filter=3x3,pad=1" \
            "fp16 N=64,C=64,K=128,input=112x112,filter=3x3,stride=2,pad=1" \
            "fp16 N=64,C=80,K=96,input=3320,filter=21,pad=10" \
            "fp16 N=128,C=16,K=32,input=88x88,filter=3x3,pad=1"; do
  set -- $spec
  echo "=== $1 $2"
  timeout 60 python3 scripts/time_instances.py dwsep_conv_fwd NHWGC $1 "$2" --family rowtile --show 8 2>&1 | tail -10
done
timeout 90 ncu --clock-control none -k regex:"kf_main" -c 1 --section SpeedOfLight --section Occupancy \
  --section WarpStateStats --section MemoryWorkloadAnalysis --metrics dram__bytes_read.sum,dram__bytes_write.sum \
  python3 scripts/profile_one.py dwsep_conv_fwd NHWGC fp16 "N=64,C=64,K=128,input=112x112,filter=3x3,pad=1" \
  dwsep_conv_fwd_2d_nhwgc_fp16_rowtile_b128x128_w2x4_r4_win_c64_k3x3s1x1d1x1 > ${OUT:-.}/ncu_mnv1_b64_win.txt 2>&1
grep -E "Duration|DRAM Throughput|Issued Warp|Eligible Warps|Achieved Occupancy|dram__bytes" ${OUT:-.}/ncu_mnv1_b64_win.txt
fi
