#!/bin/bash
# One H200 call: the named suite half tuned in full on a fresh DB (every candidate of every family verified and
# timed, PyTorch in the same run); with "fit" also the public suite's dwsep rows. Usage: gpu_bench.sh fit|heldout|fresh [seconds]
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
PART=$1; DTYPE=$([ "$PART" = heldout ] && echo bf16 || echo fp16)
start=$(date +%s)
timeout ${2:-480} bash -c "$(declare -f KF); KF bench --suite bench/suites/rowtile_$PART.toml --dtypes $DTYPE --reps 30 --db $OUT/$PART.db --out $OUT/bench_$PART" > $OUT/bench_$PART.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_$PART.log
tail -4 $OUT/bench_$PART.log
if [ "$PART" = fit ]; then
  timeout 90 bash -c "$(declare -f KF); KF bench --ops dwsep_conv_fwd --reps 30 --db $OUT/suite.db --out $OUT/bench_suite" > $OUT/bench_suite.log 2>&1
  echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_suite.log
  grep -E "ours|geomean|rc=" $OUT/bench_suite.log
fi
rm -f $OUT/bench_*/*.png
