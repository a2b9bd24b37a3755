# twopass's kf_main launched early (programmatic dependent launch, templates/common/pdl.h): measured against the
# same binaries launched plainly, then, where it pays, the correctness checks and the shipped twopass winners
# timed again on the changed source.    bash bench/results/h200-twopass-pdl/plan.sh [speed]   (one H200 call;
# `speed`: the comparison and the shipped winners only, as run under the rule of commit 626fa2f, since removed)
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
# 1. speed: every twopass point of nine layers, early and plain in turns
timeout 240 python3 bench/results/h200-twopass-pdl/ab.py --top 0 2>&1 | tee $OUT/ab.txt | grep -v "^  plain"
grep -q "geomean" $OUT/ab.txt || exit 1
gain=$(tail -1 $OUT/ab.txt | grep -o "[0-9.]*x geomean" | grep -o "^[0-9.]*")
python3 -c "import sys; sys.exit(0 if float('$gain') >= 1.01 else 1)" || { echo "no gain ($gain): stop"; exit 0; }
if [ "${1:-}" != speed ]; then
# 2. correctness with the early launch: every twopass instance against the reference, random shapes against PyTorch
timeout 260 python3 -m pytest -m gpu -q -x tests/test_gpu_dwsep_conv_fwd.py -k twopass 2>&1 | tail -3
timeout 120 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k twopass 2>&1 | tail -4
fi
# 3. the shipped twopass winners on the changed source
KF db import shipped/sm_90.json --db $OUT/ship.db > /dev/null
KF db verify --changed --op dwsep_conv_fwd --db $OUT/ship.db > $OUT/verify.txt 2>&1; tail -2 $OUT/verify.txt
