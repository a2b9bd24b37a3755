"""Per tuned dwsep problem of a DB: the best verified time of each family (rowtile, fused, twopass element
stores, twopass staged stores) and the winner's family; then how often each family wins and rowtile's best
against the best other family. python family_best.py DB"""
import math
import sys

from factory.selector import problem_from_key
from tuning_db import TuningDB


def kind(instance: str) -> str:
    for family in ("rowtile", "fused"):
        if f"_{family}_" in instance:
            return family
    return "twopass_st" if "_st_" in instance else "twopass"


db = TuningDB(sys.argv[1])
wins: dict[str, int] = {}
ratios, staged = [], []
for w in db.winners():
    best: dict[str, float] = {}
    for m, _, _ in db.measurements(w.problem_key):
        if m.verified and m.median_us:
            k = kind(m.instance)
            best[k] = min(best.get(k, math.inf), m.median_us)
    p = problem_from_key(w.problem_key)
    top = min(best, key=best.get)
    wins[top] = wins.get(top, 0) + 1
    others = min((v for k, v in best.items() if k != "rowtile"), default=math.inf)
    if "rowtile" in best:
        ratios.append(others / best["rowtile"])
    if "twopass_st" in best and "twopass" in best:
        staged.append(best["twopass"] / best["twopass_st"])
    row = "  ".join(f"{k} {v:7.1f}" for k, v in sorted(best.items(), key=lambda kv: kv[1]))
    tiles = math.ceil(p.K / 128)
    print(f"C={p.C:4d} K={p.K:4d} W={p.output[-1]:5d} taps={math.prod(p.filter):3d}  {row}")
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
print("wins:", wins)
print(f"rowtile's best against the best other family: geomean {gm(ratios):.3f}x over {len(ratios)}, "
      f"min {min(ratios):.2f} max {max(ratios):.2f}")
print(f"twopass staged against element stores (best of each): geomean {gm(staged):.3f}x over {len(staged)}, "
      f"min {min(staged):.2f} max {max(staged):.2f}")
