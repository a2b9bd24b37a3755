"""Per tuned dwsep problem of a DB (gunzip the committed ones first): twopass's best `_tma` point, its best point
with the threads' copies, the row's winner, and the prior's pick against the best with `_tma` ranked as today and
with it never preferred. python tma_in_tunes.py DB"""
import math
import sys
from pathlib import Path

import factory.ops.dwsep_conv_fwd.twopass as twopass
from factory.device import TARGETS
from factory.selector import heuristic_pick, lookup, problem_from_key
from tuning_db import TuningDB

TARGET = TARGETS["sm_90a"]


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():  # TuningDB would create a missing file
    print(f"usage: {Path(sys.argv[0]).name} DB (an existing SQLite tuning database)", file=sys.stderr)
    sys.exit(2)
db = TuningDB(sys.argv[1])
tuned = []
for w in db.winners():
    problem = problem_from_key(w.problem_key)
    listed = {c.name for c in lookup(problem, target=TARGET)}
    tuned.append((problem, {m.instance: m.median_us for m, _, _ in db.measurements(w.problem_key)
                            if m.verified and m.median_us and m.instance in listed}))
gains = []
for problem, times in tuned:
    tma = min((us for n, us in times.items() if "_twopass_" in n and "_tma_" in n), default=math.nan)
    plain = min((us for n, us in times.items() if "_twopass_" in n and "_tma_" not in n), default=math.nan)
    if not math.isnan(tma):
        gains.append(plain / tma)
    winner = min(times, key=times.get)
    print(f"{problem.layout.value} C={problem.C:4} K={problem.K:4} W={problem.output[-1]:4} taps={math.prod(problem.filter):3} "
          f"tma {tma:7.1f} threads {plain:7.1f} ({plain / tma:5.3f}x)  best {times[winner]:7.1f} {winner.split('_', 5)[5][:40]}")
if not tuned:
    print(f"{sys.argv[1]}: no tuned dwsep problem", file=sys.stderr)
    sys.exit(2)
if gains:
    print(f"twopass's best with the threads' copies / its best `_tma`: geomean {geomean(gains):.3f} over {len(gains)}, "
          f"{min(gains):.2f}-{max(gains):.2f}x")
else:
    print("no `_tma` point measured in this DB")
regret = lambda: [times[heuristic_pick(p, target=TARGET).name] / min(times.values()) for p, times in tuned]  # noqa: E731
today = regret()
twopass.TMA_PREFERENCE = -twopass.TMA_PRIOR_GAP
never = regret()
print(f"prior's pick / best: {geomean(today):.3f} (worst {max(today):.2f}) as ranked, {geomean(never):.3f} "
      f"(worst {max(never):.2f}) with `_tma` never preferred; {len(tuned)} problems")
