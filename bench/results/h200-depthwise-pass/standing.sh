# Where the fused forward stands against PyTorch after §99 (bench/NOTES.md §101): the public suite's dwsep rows and
# 16 problems of a seed never drawn before (131), every candidate of every family tuned on fresh DBs, PyTorch's
# two calls in the same run.
set -u
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
timeout 110 bash -c "$(declare -f KF); KF bench --ops dwsep_conv_fwd --reps 30 --db $OUT/suite.db --out $OUT/suite" > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "mnv1|geomean" $OUT/suite.log | tail -6
timeout 330 bash -c "$(declare -f KF); KF bench --random 16 --seed 131 --ops dwsep_conv_fwd --dtypes fp16,bf16 --reps 30 --db $OUT/random.db --out $OUT/random131" > $OUT/random131.log 2>&1
echo "random rc=$?"; tail -4 $OUT/random131.log; rm -f $OUT/*/*.png; gzip -f $OUT/*.db
