"""Best `_tma` point against the best point with the threads' copies, per layer and per (tile, stages, store)
twin, from plan.sh's time_instances output (plan.txt)."""

import math
import re
import sys
from collections import defaultdict
from pathlib import Path

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
        kinds = {tma for (_, _, _, tma) in times}
        if kinds != {False, True}:
            print(f"{layer}: no {'`_tma`' if True not in kinds else 'threads'}' points timed, left out")
            continue
        best = {k: min(v for (t, s, st, tma), v in times.items() if tma == k) for k in (False, True)}
        pairs = [times[(t, s, st, False)] / v for (t, s, st, tma), v in times.items() if tma and (t, s, st, False) in times]
        ratios.append(best[False] / best[True])
        twins = (f"twins {len(pairs)}: {math.exp(sum(map(math.log, pairs)) / len(pairs)):.3f}x geomean, "
                 f"{min(pairs):.2f}-{max(pairs):.2f}x" if pairs else "no twins")
        print(f"{layer}: threads' best {best[False]:.1f} us, tma best {best[True]:.1f} us ({best[False] / best[True]:.3f}x); "
              + twins)
    if not ratios:
        print(f"{path}: no layer with both kinds of point timed", file=sys.stderr)
        sys.exit(2)
    print(f"best against best, geomean over {len(ratios)} layers: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x")


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
        print(f"usage: {Path(sys.argv[0]).name} FILE (plan.sh's or heldout.sh's time_instances output)", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
