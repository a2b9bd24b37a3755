"""Per tuned dwsep problem of a DB: the best rowtile point with and without the input window (`_win`), and
the overall winner. python window_vs_plain.py DB"""
import math, sys
from pathlib import Path
from factory.selector import problem_from_key
from tuning_db import TuningDB
if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():  # TuningDB would create a missing file
    print(f"usage: {Path(sys.argv[0]).name} DB (an existing SQLite tuning database)", file=sys.stderr)
    sys.exit(2)
db = TuningDB(sys.argv[1]); r = []
for w in db.winners():
    best = {"win": math.inf, "plain": math.inf}; name = {}
    for m, _, _ in db.measurements(w.problem_key):
        if m.verified and m.median_us and "_rowtile_" in m.instance:
            k = "win" if "_win_" in m.instance else "plain"
            if m.median_us < best[k]: best[k] = m.median_us; name[k] = m.instance
    if math.isinf(best["win"]) or math.isinf(best["plain"]): continue
    p = problem_from_key(w.problem_key)
    r.append(best["plain"] / best["win"])
    print(f"C={p.C:4} K={p.K:4} W={p.output[-1]:5} taps={math.prod(p.filter):3} s={p.stride[-1]} plain {best['plain']:7.1f} win {best['win']:7.1f} {best['plain']/best['win']:.3f} {name['win'].split('rowtile_')[1][:18]} winner={'WIN' if '_win_' in w.instance else w.instance.split('_')[5]}")
if not r:
    print("no problem with both window and plain rowtile points timed", file=sys.stderr)
    sys.exit(2)
print(f"plain/win geomean {math.exp(sum(map(math.log, r))/len(r)):.3f} over {len(r)}; window faster on {sum(x > 1 for x in r)}")
