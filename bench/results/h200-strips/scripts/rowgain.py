"""Row-level gain of strips: min(fused, twopass w1) vs min(fused, any twopass), and which strip wins where."""
import math, re, sys
from tuning_db import TuningDB
from factory.selector import problem_from_key
for path in sys.argv[1:]:
    db = TuningDB(path)
    gains = []
    for w in db.winners():
        latest = {m.instance: m for m, _, _ in db.measurements(w.problem_key)}
        best = {}
        for m in latest.values():
            if m.median_us is None or not m.verified:
                continue
            s = re.search(r"_twopass_.*_w(\d+)_", m.instance)
            k = int(s.group(1)) if s else "fused"
            best[k] = min(best.get(k, 1e9), m.median_us)
        if 1 not in best:
            continue
        before = min(best.get("fused", 1e9), best[1]); after = min(best.values())
        tw = {k: v for k, v in best.items() if k != "fused"}
        top = min(tw, key=tw.get)
        p = problem_from_key(w.problem_key)
        wo = p.output[-1]
        gains.append(before / after)
        print(f"{before/after:5.2f}x row  best strip w{top} ({tw[1]/tw[top]:.2f}x w1)  Wo={wo:4d} taps={math.prod(p.filter):3d} "
              f"{'CL' if p.channels_last else 'NC'} C={p.C} K={p.K} " + " ".join(f"w{k}:{tw[1]/v:.2f}" for k, v in sorted(tw.items())))
    print(f"{path}: rows {len(gains)}, geomean {math.exp(sum(map(math.log, gains))/len(gains)):.3f}x, max {max(gains):.2f}")
