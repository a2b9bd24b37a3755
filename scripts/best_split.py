"""Per layer of a time_instances.py listing (twopass_before_after.sh's after.txt): the best point whose name holds
a fragment against the best point whose name does not, with their times and their ratios to PyTorch.

    python3 scripts/best_split.py after.txt _tl_
"""

from __future__ import annotations

import re
import sys

ROW = re.compile(r"\s+([0-9.]+) us\s+([0-9.]+)x\s.*?(\S+_conv_fwd\S+)")


def best_split(lines: list[str], fragment: str) -> list[str]:
    """One line a layer that has points of both kinds: other / with (x), then each best's time and x PyTorch."""
    best: dict[str, dict[bool, tuple[float, float]]] = {}
    layer = None
    for line in lines:
        if line.startswith("=== "):
            layer = line[4:].strip()
            best[layer] = {}
        match = ROW.match(line)
        if match and layer is not None:
            best[layer].setdefault(fragment in match.group(3), (float(match.group(1)), float(match.group(2))))
    return [f"{kinds[False][0] / kinds[True][0]:.2f}x  without {kinds[False][0]:.1f} us ({kinds[False][1]:.2f}x PyTorch) "
            f"with {fragment} {kinds[True][0]:.1f} us ({kinds[True][1]:.2f}x)  {layer}"
            for layer, kinds in best.items() if len(kinds) == 2]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python3 scripts/best_split.py AFTER.txt FRAGMENT", file=sys.stderr)
        raise SystemExit(2)
    try:
        with open(sys.argv[1]) as listing:
            text = listing.read()
    except OSError as exc:
        print(f"best_split.py: {sys.argv[1]}: {exc.strerror}", file=sys.stderr)
        raise SystemExit(2) from None
    print("\n".join(best_split(text.splitlines(), sys.argv[2])))
