#!/bin/bash
# Call 2 (H200): the suite bench's mnv1_dw3/speech rows again (served as in the suite run), then the probe
# with the suite run's input seed.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site > /dev/null 2>&1
KF="python3 -c 'import sys; from factory.cli import main; sys.exit(main())'"
python3 -c 'import sys; from factory.cli import main; sys.exit(main())' bench --ops conv_bwd_weight --cases mnv1_dw3,speech_dw1d --select nearest --db $OUT/empty.db --reps 30 --seed 2206237393 --out $OUT/bench_a > $OUT/bench_a.txt 2>&1
python3 -c 'import sys; from factory.cli import main; sys.exit(main())' bench --ops conv_bwd_weight --select nearest --db $OUT/empty.db --reps 30 --seed 2206237393 --out $OUT/bench_b > $OUT/bench_b.txt 2>&1
timeout 300 python3 build/s61/carveout.py 2206237393 > $OUT/carveout2.txt 2>&1; echo "rc=$?" >> $OUT/carveout2.txt
rm -f $OUT/empty.db; rm -rf $OUT/bench_a/*.png $OUT/bench_b/*.png
