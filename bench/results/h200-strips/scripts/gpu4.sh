#!/bin/bash
# Call 4 (H200): the shipped winners call 3 did not reach, re-timed on this GPU (`db verify --shipped` per op,
# into call 3's DB, whose re-timed winners are skipped).
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
cp build/s58/h200_partial.db $OUT/h200_verified.db
for spec in "dwsep_conv_fwd 100" "groupnorm_bwd 110" "conv_bwd_weight 220"; do
  set -- $spec
  timeout $2 bash -c "$(declare -f KF); KF db verify --shipped --op $1 --db $OUT/h200_verified.db" > $OUT/verify_$1.log 2>&1
  echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/verify_$1.log
done
python3 -c "import sqlite3; c=sqlite3.connect('$OUT/h200_verified.db'); c.execute('pragma wal_checkpoint(TRUNCATE)'); print(c.execute('select op, count(*) from winners group by op').fetchall())"
gzip -f $OUT/h200_verified.db $OUT/verify_*.log
