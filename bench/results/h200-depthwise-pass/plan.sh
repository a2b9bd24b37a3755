# Prepared on branch prepared/depthwise-pass-instructions, not run yet: twopass's kf_depthwise with fewer
# instructions a strip (bench/NOTES.md 99): channels-last whole chunks with 32-bit offsets and a filter row's
# columns loaded without a branch (outside ones as zeros, so the row's loads issue together), bf16 unpacked by
# words, the block's shared weights stored as floats (converted once a block, not once a strip).
#   bash bench/results/h200-depthwise-pass/plan.sh verify   (one H200 call, ~5 min: GPU tests, ncu)
#   bash bench/results/h200-depthwise-pass/plan.sh time     (one H200 call, ~6 min: before/after, shipped)
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
HERE=bench/results/h200-depthwise-pass
BEFORE=${BEFORE:-$HERE/before}  # the code "before" is timed on: copies of the template and the family module
LAYERS=("NHWGC bf16 N=64,C=672,K=112,input=14x14,filter=5x5,pad=2" "NHWGC fp16 N=32,C=960,K=160,input=7x7,filter=5x5,pad=2"
        "NHWGC fp16 N=32,C=768,K=768,input=14x14,filter=7x7,pad=3" "NHWGC fp16 N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1"
        "NHWGC bf16 N=16,C=1152,K=192,input=7x7,filter=3x3,pad=1" "NHWGC fp16 N=64,C=384,K=384,input=28x28,filter=7x7,pad=3"
        "NHWGC fp16 N=16,C=472,K=248,input=19x19,filter=3x3,pad=1" "NHWGC bf16 N=4,C=256,K=256,input=500,filter=7,pad=3"
        "NHWGC fp16 N=8,C=96,K=200,input=33x21,filter=3x3,stride=2,pad=1" "NGCHW fp16 N=16,C=576,K=576,input=14x14,filter=3x3,pad=1")
timeall() { for l in "${LAYERS[@]}"; do set -- $l; echo "=== $*"; timeout 90 python3 scripts/time_instances.py dwsep_conv_fwd "$@" --family twopass --show 6 2>&1 | tail -8; done; }
if [ "${1:-}" = verify ]; then
  timeout 280 python3 -m pytest -m gpu -q -x tests/test_gpu_dwsep_conv_fwd.py -k twopass 2>&1 | tail -3
  timeout 120 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k twopass 2>&1 | tail -4
  bash $HERE/ncu.sh 2>&1 | grep -E "^  kf_|Duration|Registers Per|Achieved Occ|Theoretical Occ|Issue Slots|L1TEX|Throughput" | head -30
elif [ "${1:-}" = time ]; then
  # before: main's template and family module in place (compiled afresh: the sources differ), then after
  cp templates/dwsep_conv_fwd/twopass.hip.j2 /tmp/after.j2; cp factory/ops/dwsep_conv_fwd/twopass.py /tmp/after.py
  cp $BEFORE/twopass.hip.j2.txt templates/dwsep_conv_fwd/twopass.hip.j2; cp $BEFORE/twopass.py.txt factory/ops/dwsep_conv_fwd/twopass.py
  timeall > $OUT/before.txt 2>&1
  cp /tmp/after.j2 templates/dwsep_conv_fwd/twopass.hip.j2; cp /tmp/after.py factory/ops/dwsep_conv_fwd/twopass.py
  timeall > $OUT/after.txt 2>&1
  grep -A2 "^===" $OUT/before.txt | grep -v "^--"; grep -A2 "^===" $OUT/after.txt | grep -v "^--"
  KF db import shipped/sm_90.json --db $OUT/ship.db > /dev/null
  KF db verify --changed --op dwsep_conv_fwd --db $OUT/ship.db > $OUT/verify.txt 2>&1; tail -2 $OUT/verify.txt
fi
