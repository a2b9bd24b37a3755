#!/bin/bash
# Call 5 (H200): the public suite served from the shipped H200 winners (fresh user DB: nothing tuned unless
# a row has no winner), PyTorch in the same run.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
timeout 280 bash -c "$(declare -f KF); KF bench --reps 50 --db $OUT/suite.db --out $OUT/bench_suite" > $OUT/bench_suite.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_suite.log
rm -f $OUT/suite.db* $OUT/bench_suite/*.png
