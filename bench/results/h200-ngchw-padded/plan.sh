# Prepared on branch prepared/ngchw-padded-chunk, not run yet (bench/NOTES.md §102): twopass's NCHW-style
# depthwise pass where C is not a multiple of 8 reads the last chunk's padding channels as its last real channel
# (no predicate an element; the padding's sums written as zeros), from per-channel plane pointers. Static SASS:
# 42-47 % fewer instructions a strip there; every other kernel's SASS unchanged.
#   bash bench/results/h200-ngchw-padded/plan.sh verify   (one H200 call, ~4.5 min: GPU tests, ncu)
#   bash bench/results/h200-ngchw-padded/plan.sh time     (one H200 call, ~5 min: before/after, shipped)
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
HERE=bench/results/h200-ngchw-padded
# Five layers whose C is not a multiple of 8 (the first two are seed 131's rows below PyTorch, §101), then two
# controls with whole chunks, whose kernels compile to the same SASS as before.
LAYERS=("NGCHW fp16 N=32,C=415,K=59,input=68x68,filter=5x5,stride=2,pad=2,act_dw=relu6"
        "NGCHW fp16 N=64,C=647,K=71,input=25x25,filter=5x5,stride=2,pad=2,act_dw=relu6"
        "NGCHW fp16 N=128,C=41,K=21,input=22x22,filter=3x3,pad=1,bias_dw=1,bias_pw=1"
        "NGCHW bf16 N=16,C=522,K=144,input=40x40,filter=7x7,pad=3"
        "NGCHW bf16 N=4,C=131,K=278,input=10x9x16,filter=3x3x3,stride=1x1x2,pad=4x2x0,dilation=2x1x1"
        "NGCHW fp16 N=16,C=576,K=576,input=14x14,filter=3x3,pad=1" "NGCHW bf16 N=16,C=520,K=144,input=40x40,filter=7x7,pad=3")
timeall() { for l in "${LAYERS[@]}"; do set -- $l; echo "=== $*"; timeout 90 python3 scripts/time_instances.py dwsep_conv_fwd "$@" --family twopass --show 6 2>&1 | tail -8; done; }
if [ "${1:-}" = verify ]; then
  timeout 280 python3 -m pytest -m gpu -q -x tests/test_gpu_dwsep_conv_fwd.py -k twopass 2>&1 | tail -3
  timeout 120 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k twopass 2>&1 | tail -4
  timeout 100 ncu --clock-control none --kernel-name regex:kf_ --launch-skip 4 --launch-count 2 --section SpeedOfLight --section Occupancy \
    python3 scripts/profile_one.py dwsep_conv_fwd NGCHW fp16 "N=32,C=415,K=59,input=68x68,filter=5x5,stride=2,pad=2,act_dw=relu6" \
    dwsep_conv_fwd_2d_ngchw_fp16_twopass_b64x128x64_p3_w2_st_k5x5s2x2d1x1_cpadded 2>&1 \
    | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|Issue Slots|DRAM Throughput"
elif [ "${1:-}" = time ]; then
  # before: main's template and family module in place (compiled afresh: the sources differ), then after
  cp templates/dwsep_conv_fwd/twopass.hip.j2 /tmp/after.j2; cp factory/ops/dwsep_conv_fwd/twopass.py /tmp/after.py
  cp $HERE/before/twopass.hip.j2.txt templates/dwsep_conv_fwd/twopass.hip.j2; cp $HERE/before/twopass.py.txt factory/ops/dwsep_conv_fwd/twopass.py
  timeall > $OUT/before.txt 2>&1
  cp /tmp/after.j2 templates/dwsep_conv_fwd/twopass.hip.j2; cp /tmp/after.py factory/ops/dwsep_conv_fwd/twopass.py
  timeall > $OUT/after.txt 2>&1
  grep -A2 "^===" $OUT/before.txt | grep -v "^--"; grep -A2 "^===" $OUT/after.txt | grep -v "^--"
  KF db import shipped/sm_90.json --db $OUT/ship.db > /dev/null
  KF db verify --changed --op dwsep_conv_fwd --db $OUT/ship.db > $OUT/verify.txt 2>&1; tail -2 $OUT/verify.txt
fi
