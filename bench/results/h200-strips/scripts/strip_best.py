"""Per tuned dwsep problem of a DB: the winner, fused's best, and twopass's best per strip (latest
verified measurement of each instance)."""
import math
import re
import sys
from tuning_db import TuningDB

db = TuningDB(sys.argv[1])
ratios = {}
for w in db.winners():
    if w.op != "dwsep_conv_fwd":
        continue
    latest = {m.instance: m for m, _, _ in db.measurements(w.problem_key)}
    best = {}
    for m in latest.values():
        if m.median_us is None or not m.verified:
            continue
        strip = re.search(r"_twopass_.*_w(\d+)_", m.instance)
        key = f"twopass w{strip.group(1)}" if strip else ("fused" if "_fused_" in m.instance else "other")
        if key not in best or m.median_us < best[key][0]:
            best[key] = (m.median_us, m.instance)
    print(w.problem_key)
    print(f"  winner {w.median_us:.2f} us {w.instance}")
    for key, (us, name) in sorted(best.items(), key=lambda kv: kv[1][0]):
        print(f"  {us:9.2f} us  {key:12s} {name}")
    if "twopass w1" in best:
        top = min(v[0] for k, v in best.items() if k.startswith("twopass"))
        ratios.setdefault("best strip vs w1", []).append(best["twopass w1"][0] / top)
        for k, v in best.items():
            if k.startswith("twopass"):
                ratios.setdefault(k + " vs w1", []).append(best["twopass w1"][0] / v[0])
for k, v in sorted(ratios.items()):
    print(f"{k}: geomean {math.exp(sum(map(math.log, v)) / len(v)):.3f}x over {len(v)} problems, "
          f"min {min(v):.3f}, max {max(v):.3f}")
