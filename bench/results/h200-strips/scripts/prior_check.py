"""On a tuned DB: the preferred strip's best time vs the best strip's; fused vs twopass per layout with
C x K x taps; what the prior's first pick serves vs the winner."""
import math, re, sys
from tuning_db import TuningDB
from factory.selector import problem_from_key, heuristic_pick
from factory.device import TARGETS
from factory.ops.dwsep_conv_fwd.twopass import preferred_strip
for path in sys.argv[1:]:
    db = TuningDB(path)
    strip_ratio, regret = [], []
    for w in db.winners():
        if w.op != "dwsep_conv_fwd":
            continue
        latest = {m.instance: m for m, _, _ in db.measurements(w.problem_key)}
        times = {m.instance: m.median_us for m in latest.values() if m.median_us is not None and m.verified}
        p = problem_from_key(w.problem_key)
        tw = {n: t for n, t in times.items() if "_twopass_" in n}
        fu = [t for n, t in times.items() if "_fused_" in n]
        pick = heuristic_pick(p, target=TARGETS["sm_90a"])
        served = times.get(pick.name)
        line = f"{'CL' if p.channels_last else 'NC'} C={p.C:4d} K={p.K:4d} taps={math.prod(p.filter):3d} CKT={p.C*p.K*math.prod(p.filter)/1e6:6.2f}M"
        if tw:
            pref = preferred_strip(p)
            by = {}
            for n, t in tw.items():
                s = int(re.search(r"_w(\d+)_", n).group(1)); by[s] = min(by.get(s, 1e9), t)
            strip_ratio.append(min(by.values()) / by[pref])
            line += f" pref w{pref} {min(by.values())/by[pref]:.2f}x best strip; twopass/fused {min(fu)/min(tw.values()) if fu else float('nan'):.2f}x"
        line += f"; prior {pick.family} serves {w.median_us/served if served else float('nan'):.2f}x winner"
        if served: regret.append(served / w.median_us)
        print(line)
    g = lambda v: math.exp(sum(map(math.log, v)) / len(v))
    print(f"{path}: preferred strip {g(strip_ratio):.3f}x best strip geomean (min {min(strip_ratio):.2f}); "
          f"prior regret geomean {g(regret):.3f} worst {max(regret):.2f} over {len(regret)}")
