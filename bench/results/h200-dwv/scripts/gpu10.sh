#!/bin/bash
# Call 10 (H200): random long-filter 1-D layers served by the prior alone (--select heuristic), this tree
# (dwv's register budget raised to 255 for this run) against the tree before dwv, PyTorch in each run.
source ./call.sh > /dev/null 2>&1; unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
python3 -m compileall -q factory .site build/s61/old > /dev/null 2>&1
B="bench --suite bench/suites/long_1d_depthwise_bwd_weight.toml --dtypes fp16 --select heuristic --reps 30 --seed 7"
python3 -c 'import sys; from factory.cli import main; sys.exit(main())' $B --db $OUT/e1.db --out $OUT/new > $OUT/new.txt 2>&1
PYTHONPATH=$PWD/build/s61/old:$PYTHONPATH python3 -c 'import sys; from factory.cli import main; sys.exit(main())' $B --db $OUT/e2.db --out $OUT/old > $OUT/old.txt 2>&1
rm -f $OUT/e1.db $OUT/e2.db $OUT/new/*.png $OUT/old/*.png
# The second run above imported this tree, not build/s61/old (python3 -c puts the working directory first on
# sys.path); its results were discarded. The tree before dwv ran again from inside that tree (call 11):
#   cd build/s61/old && python3 -c '...main()' bench --suite ../../../bench/suites/long_1d_depthwise_bwd_weight.toml \
#     --dtypes fp16 --select heuristic --reps 30 --seed 7 --db $OUT/e2.db --out $OUT/old
# and the GPU test once more with the raised budget (call 12): pytest -m gpu tests/test_gpu_dwv_random.py
