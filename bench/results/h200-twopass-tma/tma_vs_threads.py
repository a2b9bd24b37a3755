"""Best `_tma` point against the best point with the threads' copies, per layer and per (tile, stages, store)
twin, from plan.sh's time_instances output (plan.txt)."""

import math
import re
import sys
from collections import defaultdict

LINE = re.compile(r"^\s+([\d.]+) us .*twopass_(b\d+x\d+x\d+_p\d)_(w\d+)(_st)?(_tma)?_k")


def main(path: str) -> None:
    layer, rows = None, defaultdict(dict)
    for line in open(path):
        if line.startswith("=== "):
            layer = line[4:].strip()
        elif layer and (m := LINE.match(line)):
            us, tile, strip, st, tma = m.groups()
            rows[layer][(tile, strip, bool(st), bool(tma))] = float(us)
    ratios = []
    for layer, times in rows.items():
        best = {k: min(v for (t, s, st, tma), v in times.items() if tma == k) for k in (False, True)}
        pairs = [times[(t, s, st, False)] / v for (t, s, st, tma), v in times.items() if tma and (t, s, st, False) in times]
        g = math.exp(sum(map(math.log, pairs)) / len(pairs))
        ratios.append(best[False] / best[True])
        print(f"{layer}: threads' best {best[False]:.1f} us, tma best {best[True]:.1f} us ({best[False] / best[True]:.3f}x); "
              f"twins {len(pairs)}: {g:.3f}x geomean, {min(pairs):.2f}-{max(pairs):.2f}x")
    print(f"best against best, geomean over {len(ratios)} layers: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x")


if __name__ == "__main__":
    main(sys.argv[1])
