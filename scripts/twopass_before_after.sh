# A change to twopass's template or family module, on an H200 (bench/NOTES.md 99-102):
#   verify: every twopass instance against the numpy reference (outputs poisoned), then 150 runs of twopass points
#           on 50 random shapes against PyTorch;
#   time:   every twopass point of each layer in $LAYERS_FILE (one "LAYOUT DTYPE SPEC" a line) with $BEFORE's
#           copies of the template and module in place (twopass.hip.j2.txt, twopass.py.txt; compiled afresh),
#           then with the change, PyTorch in the same runs (before.txt, after.txt under $OUT); then the shipped
#           twopass winners timed again on the change (`db verify --changed`: $OUT/verify.txt, $OUT/ship.db);
#   layers, shipped: time's two halves, for a device call each where both together would run too long;
#   current: every twopass point of the layers on the tree as it is ($OUT/after.txt), where a change adds points
#            and leaves the others' sources as they were (the before is then in the same run).
# SHOW (default 6): the fastest points listed a layer. SPLIT (current): a name fragment (`_tl_`, say); each layer's
# best point whose name holds it is then printed against its best other point. TOP: time only the heuristic's
# first TOP points of each layer, and every point whose name holds SPLIT (a quicker look, ~5x fewer points;
# the best other point may then be missed).
# Usage (repository root, .whl/ carried): BEFORE=dir LAYERS_FILE=file bash scripts/twopass_before_after.sh MODE
set -u
case "${1:-}" in verify | time | layers | shipped | current) ;; *)
  echo "usage: BEFORE=dir LAYERS_FILE=file bash scripts/twopass_before_after.sh verify|time|layers|shipped|current" >&2
  exit 2 ;; esac
if [ "$1" != verify ] && [ ! -d "${OUT:-}" ]; then echo "$1 needs OUT (a folder)" >&2; exit 2; fi
if { [ "$1" = time ] || [ "$1" = layers ]; } && { [ ! -f "${LAYERS_FILE:-}" ] || [ ! -f "${BEFORE:-}/twopass.hip.j2.txt" ] || [ ! -f "${BEFORE:-}/twopass.py.txt" ]; }; then
  echo "$1 needs LAYERS_FILE (a file) and BEFORE (a folder with twopass.hip.j2.txt and twopass.py.txt)" >&2
  exit 2
fi
if [ "$1" = current ] && [ ! -f "${LAYERS_FILE:-}" ]; then echo "current needs LAYERS_FILE (a file)" >&2; exit 2; fi
case "${TOP:-1}:${SHOW:-6}" in *[!0-9:]* | 0:* | *:0) echo "TOP and SHOW take whole numbers of 1 or more" >&2; exit 2 ;; esac
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2> /dev/null
export PYTHONPATH=$PWD/.site:$PWD:$PWD/scripts:$PWD/tests
unset PYTHONDONTWRITEBYTECODE; export KFACTORY_SHIPPED=off PYTHONUNBUFFERED=1
KF() { python3 -c 'import sys; from factory.cli import main; sys.exit(main())' "$@"; }
TEMPLATE=templates/dwsep_conv_fwd/twopass.hip.j2 MODULE=factory/ops/dwsep_conv_fwd/twopass.py
timeall() {
  while read -r layout dtype spec; do
    echo "=== $layout $dtype $spec"
    timeout 90 python3 scripts/time_instances.py dwsep_conv_fwd "$layout" "$dtype" "$spec" --family twopass --show "${SHOW:-6}" \
      ${TOP:+--top "$TOP"} ${TOP:+${SPLIT:+--also "$SPLIT"}} 2>&1 | tail -n "$((${SHOW:-6} + 2))"
  done < "$LAYERS_FILE"
}
case "${1:-}" in
  verify)
    timeout 280 python3 -m pytest -m gpu -q -x tests/test_gpu_dwsep_conv_fwd.py -k twopass 2>&1 | tail -3
    timeout 120 python3 -m pytest -m gpu -q -x -s tests/test_gpu_dwsep_random.py -k twopass 2>&1 | tail -4 ;;
  time) bash "$0" layers && bash "$0" shipped ;;
  layers)
    cp $TEMPLATE /tmp/after.j2; cp $MODULE /tmp/after.py
    trap 'cp /tmp/after.j2 $TEMPLATE; cp /tmp/after.py $MODULE' EXIT  # the change back in place, however this ends
    cp "$BEFORE/twopass.hip.j2.txt" $TEMPLATE; cp "$BEFORE/twopass.py.txt" $MODULE
    timeall > $OUT/before.txt 2>&1
    cp /tmp/after.j2 $TEMPLATE; cp /tmp/after.py $MODULE
    timeall > $OUT/after.txt 2>&1
    grep -A2 "^===" $OUT/before.txt | grep -v "^--"; grep -A2 "^===" $OUT/after.txt | grep -v "^--" ;;
  current)
    timeall > $OUT/after.txt 2>&1; grep -A2 "^===" $OUT/after.txt | grep -v "^--"
    if [ -n "${SPLIT:-}" ]; then python3 scripts/best_split.py "$OUT/after.txt" "$SPLIT"; fi ;;
  shipped)
    KF db import shipped/sm_90.json --db $OUT/ship.db > /dev/null
    KF db verify --changed --op dwsep_conv_fwd --db $OUT/ship.db > $OUT/verify.txt 2>&1; tail -2 $OUT/verify.txt ;;
esac
