"""Within-family pick regret of twopass's prior on tuned DBs (each instance's latest verified time)."""
import math, sys
from tuning_db import TuningDB
from factory.catalog import instance_by_name
from factory.device import TARGETS
from factory.ops import solver_for
from factory.selector import problem_from_key

def rows(path, layout):
    db = TuningDB(path)
    for w in db.winners():
        if ':' + layout + ':' not in w.problem_key:
            continue
        latest = {m.instance: m for m, _, _ in db.measurements(w.problem_key)}
        times = {n: m.median_us for n, m in latest.items() if m.verified and m.median_us and '_twopass_' in n}
        if times:
            yield problem_from_key(w.problem_key), times

if __name__ == "__main__":
    t = TARGETS["sm_90a"]
    regrets = []
    for path, layout in ((sys.argv[1], "nhwgc"), (sys.argv[1], "ngchw")):
        for p, times in rows(path, layout):
            s = solver_for(p.op)
            pick = max(times, key=lambda n: s.heuristic_score("twopass", instance_by_name(n).params, p, t))
            best = min(times.values())
            regrets.append(times[pick] / best)
            print(f"{times[pick]/best:.2f} {pick.split('twopass_')[1]:32s} best {min(times, key=times.get).split('twopass_')[1]}")
    print("geomean", math.exp(sum(map(math.log, regrets)) / len(regrets)), "worst", max(regrets))
