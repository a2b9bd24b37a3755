# twopass's GEMM with bulk tensor copies from a producer warp (`_tma`): verified against the numpy reference
# (every twopass instance on the GPU test's problems) and PyTorch (50 random shapes), then every twopass point of
# six layers timed (time_instances: events, L2 flushed, median of 20; PyTorch in the same run).
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
if [ "${1:-all}" = tune ]; then  # after the catalog kept only staged 128-column `_tma` points: the random test, then
  # the public suite's dwsep rows and the fresh suite (18 fp16 layers) tuned in full on fresh DBs, PyTorch in the run
  timeout 200 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k bulk 2>&1 | tail -4
  timeout 100 bash -c "$(declare -f KF); KF bench --ops dwsep_conv_fwd --reps 30 --db $OUT/suite.db --out $OUT/bench_suite" > $OUT/bench_suite.log 2>&1
  grep -E "ours|geomean|mnv1" $OUT/bench_suite.log | tail -6
  timeout 280 bash -c "$(declare -f KF); KF bench --suite bench/suites/rowtile_fresh.toml --dtypes fp16 --reps 30 --db $OUT/fresh.db --out $OUT/bench_fresh" > $OUT/bench_fresh.log 2>&1
  echo "rc=$?"; tail -3 $OUT/bench_fresh.log; rm -f $OUT/bench_*/*.png
  exit 0
fi
if [ "${1:-all}" != time ]; then
  timeout 300 python3 -m pytest -m gpu -q -x tests/test_gpu_dwsep_conv_fwd.py -k twopass 2>&1 | tail -4
  timeout 200 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k bulk 2>&1 | tail -4
fi
t() { echo "=== $*"; timeout 100 python3 scripts/time_instances.py dwsep_conv_fwd "$@" --family twopass --show 200 2>&1 | tail -120; }
t NHWGC fp16 "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1"
t NHWGC bf16 "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1"
t NHWGC bf16 "N=64,C=512,K=512,input=14x14,filter=7x7,pad=3"
t NHWGC bf16 "N=64,C=272,K=112,input=22x22,filter=7x7,pad=3"
t NHWGC fp16 "N=64,C=64,K=128,input=112x112,filter=3x3,pad=1"
t NGCHW fp16 "N=32,C=320,K=320,input=28x28,filter=5x5,pad=2"
