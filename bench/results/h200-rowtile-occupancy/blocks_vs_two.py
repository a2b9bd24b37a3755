"""Per tuned dwsep problem of a DB (gunzip the committed ones first): rowtile's best point asking for 2, 3 and 4
blocks an SM, the winner, and the prior's pick against it; then the prior's regret with the blocks preference and
with the `_o3` / `_o4` points never preferred. python blocks_vs_two.py DB"""
import math
import re
import sys

import factory.ops.dwsep_conv_fwd.rowtile as rowtile
from factory.device import TARGETS
from factory.selector import heuristic_pick, problem_from_key
from tuning_db import TuningDB

TARGET = TARGETS["sm_90a"]


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def prior_regrets(db: TuningDB) -> list[float]:
    regrets = []
    for w in db.winners():
        times = {m.instance: m.median_us for m, _, _ in db.measurements(w.problem_key) if m.verified and m.median_us}
        regrets.append(times[heuristic_pick(problem_from_key(w.problem_key), target=TARGET).name] / w.median_us)
    return regrets


db = TuningDB(sys.argv[1])
gains = []
for w in db.winners():
    best: dict[int, float] = {}
    for m, _, _ in db.measurements(w.problem_key):
        if m.verified and m.median_us and "_rowtile_" in m.instance:
            blocks = int(re.search(r"_r\d(?:_o(\d))?_c", m.instance).group(1) or 2)
            best[blocks] = min(best.get(blocks, math.inf), m.median_us)
    p = problem_from_key(w.problem_key)
    if 2 in best and len(best) > 1:
        gains.append(best[2] / min(best.values()))
    print(f"C={p.C:4} K={p.K:4} W={p.output[-1]:5} taps={math.prod(p.filter):3} s={p.stride[-1]} "
          + " ".join(f"o{b}={best.get(b, math.nan):6.1f}" for b in (2, 3, 4))
          + f"  winner {w.median_us:6.1f} {w.instance.split('16_', 1)[1][:34]}")
print(f"rowtile's best at 2 blocks an SM / its best: geomean {geomean(gains):.3f} over {len(gains)}, max {max(gains):.2f}")
with_pref = prior_regrets(db)
rowtile.blocks_preference = lambda blocks, problem: 0.0 if blocks == 2 else -1.0
without = prior_regrets(db)
print(f"prior's pick / tuned winner: {geomean(with_pref):.3f} (worst {max(with_pref):.2f}) with the blocks preference, "
      f"{geomean(without):.3f} (worst {max(without):.2f}) with 3 and 4 never preferred; {len(with_pref)} problems")
