# Where the fused forward stands against PyTorch on an H200 (`.whl/` carried): the public suite's dwsep rows, then
# COUNT problems of random seed SEED, every candidate of every family tuned on fresh DBs, PyTorch's two calls in
# the same run. Under $OUT: suite/, suite.log, suite.db.gz (not with SUITE=0), randomSEED/, randomSEED.log,
# random.db.gz.
# Usage (repository root): [SUITE=0] bash scripts/dwsep_standing.sh SEED [COUNT (default 16)]
set -u
SEED=${1:-} COUNT=${2:-16}
case "$SEED:$COUNT" in :* | *[!0-9:]* | *:0) echo "usage: bash scripts/dwsep_standing.sh SEED [COUNT], whole numbers, COUNT >= 1" >&2; exit 2 ;; esac
if [ ! -d "${OUT:-}" ]; then echo "OUT must name a folder" >&2; exit 2; fi
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
if [ "${SUITE:-1}" != 0 ]; then
  timeout 110 bash -c "$(declare -f KF); KF bench --ops dwsep_conv_fwd --reps 30 --db $OUT/suite.db --out $OUT/suite" > $OUT/suite.log 2>&1
  echo "suite rc=$?"; grep -E "mnv1|geomean" $OUT/suite.log | tail -6
fi
timeout 480 bash -c "$(declare -f KF); KF bench --random $COUNT --seed $SEED --ops dwsep_conv_fwd --dtypes fp16,bf16 --reps 30 --db $OUT/random.db --out $OUT/random$SEED" > $OUT/random$SEED.log 2>&1
echo "random rc=$?"; tail -4 $OUT/random$SEED.log; rm -f $OUT/*/*.png; gzip -f $OUT/*.db
