"""Per tuned dwsep problem of a DB (gunzip the committed ones first), among the candidates today's catalog lists
(the runs also timed 128- and 512-thread rowtile points, since dropped): rowtile's best point asking for 2, 3 and
4 blocks an SM, the best of all, and the prior's regret (its pick / the best) with the blocks preference and
with the `_o3` / `_o4` points never preferred. python blocks_vs_two.py DB"""
import math
import re
import sys
from pathlib import Path

import factory.ops.dwsep_conv_fwd.rowtile as rowtile
from factory.device import TARGETS
from factory.selector import heuristic_pick, lookup, problem_from_key
from tuning_db import TuningDB

TARGET = TARGETS["sm_90a"]


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def catalog_times(db: TuningDB) -> list[tuple[object, dict[str, float]]]:
    """Each tuned problem with its verified times of the candidates today's catalog lists for it."""
    out = []
    for w in db.winners():
        problem = problem_from_key(w.problem_key)
        listed = {c.name for c in lookup(problem, target=TARGET)}
        out.append((problem, {m.instance: m.median_us for m, _, _ in db.measurements(w.problem_key)
                              if m.verified and m.median_us and m.instance in listed}))
    return out


def prior_regrets(tuned: list[tuple[object, dict[str, float]]]) -> list[float]:
    return [times[heuristic_pick(problem, target=TARGET).name] / min(times.values()) for problem, times in tuned]


if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():  # TuningDB would create a missing file
    print(f"usage: {Path(sys.argv[0]).name} DB (an existing SQLite tuning database)", file=sys.stderr)
    sys.exit(2)
tuned = catalog_times(TuningDB(sys.argv[1]))
gains = []
for problem, times in tuned:
    best: dict[int, float] = {}
    for name, us in times.items():
        if "_rowtile_" in name:
            blocks = int(re.search(r"_r\d(?:_o(\d))?_c", name).group(1) or 2)
            best[blocks] = min(best.get(blocks, math.inf), us)
    if 2 in best and len(best) > 1:
        gains.append(best[2] / min(best.values()))
    winner = min(times, key=times.get)
    print(f"C={problem.C:4} K={problem.K:4} W={problem.output[-1]:5} taps={math.prod(problem.filter):3} "
          f"s={problem.stride[-1]} " + " ".join(f"o{b}={best.get(b, math.nan):6.1f}" for b in (2, 3, 4))
          + f"  best {times[winner]:6.1f} {winner.split('16_', 1)[1][:34]}")
print(f"rowtile's best at 2 blocks an SM / its best: geomean {geomean(gains):.3f} over {len(gains)}, max {max(gains):.2f}")
with_pref = prior_regrets(tuned)
rowtile.blocks_preference = lambda blocks, problem: 0.0 if blocks == 2 else -1.0
without = prior_regrets(tuned)
print(f"prior's pick / best: {geomean(with_pref):.3f} (worst {max(with_pref):.2f}) with the blocks preference, "
      f"{geomean(without):.3f} (worst {max(without):.2f}) with 3 and 4 never preferred; {len(tuned)} problems")
