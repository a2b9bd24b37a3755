#!/bin/bash
# Call 7: the suite's two wide-K rows tuned on a DB of the shipped winners (only twopass's candidates are new),
# so that their winners can ship.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
KF db import shipped/sm_90.json --db $OUT/ship.db > /dev/null 2>&1
for dt in fp16 bf16; do
  timeout 80 bash -c "$(declare -f KF); KF tune --op dwsep_conv_fwd --layout NHWGC --dtype $dt --problem 'N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1' --db $OUT/ship.db" >> $OUT/tune_b1024.log 2>&1
  echo "rc=$?" >> $OUT/tune_b1024.log
done
KF db export $OUT/ship.json --db $OUT/ship.db > /dev/null 2>&1; gzip -f $OUT/ship.json; rm -f $OUT/ship.db
