#!/bin/bash
# shipped/sm_90.json anew: the H100 winners still servable (twopass's, whose source changed, drop out), then
# the H200's: the shipped winners re-timed there (`db verify --shipped`, calls 3-4) and the dwsep tunes of
# calls 1-3 (suite, seeds 59 and 60; seed 60's one problem tuned in part left out). Each import keeps the
# faster of two winners on the same device.
set -e
export KFACTORY_SHIPPED=off
KF() { python -m factory.cli "$@"; }
w=$(mktemp -d)
cp "$1" $w/h100.json
KF db import $w/h100.json --db $w/ship.db > /dev/null
python - "$2/r3/random60.db.gz" $w/r60.db <<'PY'
import gzip, shutil, sqlite3, sys
with gzip.open(sys.argv[1]) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
c = sqlite3.connect(sys.argv[2])
c.execute("delete from winners where problem_key like 'dwsep_conv_fwd:ngchw:fp16:2d:N=16,C=56,K=672,%'")
c.commit()
PY
for gz in $2/r4/h200_verified.db.gz $2/r1/suite.db.gz $2/r2/random.db.gz; do
  n=$(basename $gz .db.gz); gunzip -c $gz > $w/$n.db
done
for n in h200_verified suite random r60; do
  KF db export $w/$n.json --db $w/$n.db > /dev/null
  KF db import $w/$n.json --db $w/ship.db | tail -1
done
python scripts/ship_winners.py --db $w/ship.db --arch sm_90 --out "$1"
rm -rf $w
