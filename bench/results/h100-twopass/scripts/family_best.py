"""Per tuned problem of a DB: the winner, and the best verified time of each (family, rank) measured."""
import sys
from tuning_db import TuningDB
from factory.catalog import parse_instance_name

db = TuningDB(sys.argv[1])
for w in db.winners():
    best = {}
    latest = {m.instance: m for m, _, _ in db.measurements(w.problem_key)}  # oldest first: each instance's last
    for m in latest.values():
        if m.median_us is None or not m.verified:
            continue
        f = parse_instance_name(m.instance)
        key = (f["family"], f["ndim"])
        if key not in best or m.median_us < best[key][0]:
            best[key] = (m.median_us, m.instance)
    print(w.problem_key)
    print(f"  winner {w.median_us:.2f} us {w.instance}")
    for (fam, nd), (us, name) in sorted(best.items(), key=lambda kv: kv[1][0]):
        print(f"  {us:9.2f} us  {fam:6s} {nd}d  {name}")
