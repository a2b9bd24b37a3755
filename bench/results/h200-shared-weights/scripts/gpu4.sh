#!/bin/bash
# Call 4 (H200): the channels-last dwsep layers of the suite and random seed 59 tuned again on the new
# kf_depthwise (every candidate the shipped file had not measured), the shipped file rebuilt, then random
# seed 59's 24 layers and the suite's dwsep rows benched from those winners, PyTorch in the same run.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
start=$(date +%s)
KF db import shipped/sm_90.json --db $OUT/ship.db > $OUT/tunes.log 2>&1
while read layout dtype spec; do
  [ $(( $(date +%s) - start )) -gt 260 ] && { echo "skipped (time): $layout $dtype $spec" >> $OUT/tunes.log; continue; }
  echo "== $layout $dtype $spec" >> $OUT/tunes.log
  timeout 60 python3 -c 'import sys; from factory.cli import main; sys.exit(main())' tune --op dwsep_conv_fwd --layout $layout --dtype $dtype --problem "$spec" --db $OUT/ship.db --json > $OUT/tune_last.json 2>> $OUT/tunes.log
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); m=[x for x in d["measurements"] if x.get("verified")]; w=[x for x in m if x["instance"]==d["winner"]]; print("winner", d["winner"], round(w[0]["median_us"],2) if w else None, "measured", d["measured"], "reused", d["reused"], "wall", round(d["wall_s"]["total_s"],1))' $OUT/tune_last.json >> $OUT/tunes.log 2>&1
done < build/s59/tune_list.txt
echo "tunes done $(( $(date +%s) - start )) s" >> $OUT/tunes.log
python3 scripts/ship_winners.py --db $OUT/ship.db --arch sm_90 --out $OUT/sm_90.json >> $OUT/tunes.log 2>&1
timeout 170 python3 -c 'import sys; from factory.cli import main; sys.exit(main())' bench --random 24 --seed 59 --ops dwsep_conv_fwd --dtypes fp16,bf16 --reps 20 --db $OUT/ship.db --out $OUT/bench_random59 > $OUT/bench_random59.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_random59.log
timeout 60 python3 -c 'import sys; from factory.cli import main; sys.exit(main())' bench --ops dwsep_conv_fwd --reps 20 --db $OUT/ship.db --out $OUT/bench_suite > $OUT/bench_suite.log 2>&1
echo "rc=$? $(( $(date +%s) - start )) s" >> $OUT/bench_suite.log
rm -f $OUT/ship.db* $OUT/tune_last.json $OUT/bench_*/*.png
cd $OUT && tar czf benches.tgz bench_random59 bench_suite && rm -rf bench_random59 bench_suite
