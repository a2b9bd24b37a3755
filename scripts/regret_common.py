"""What the regret and timing scripts (budget_regret.py, nearest_regret.py, prior_fit.py, retune_budget.py,
time_instances.py) share: opening a tuning DB tuned in full, summing regrets up, name patterns as arguments."""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Iterable, Mapping, NoReturn

from tuning_db import TuningDB, TuningDBError


def tuned_db(path: str) -> TuningDB:
    """The DB at `path`; a missing path (opening it would create an empty DB there) or a file that is not
    a tuning DB ends the script with one line on stderr, exit 2."""
    if not Path(path).is_file():
        fail(f"{path}: no such tuning database")
    try:
        return TuningDB(path)
    except TuningDBError as exc:
        fail(" ".join(str(exc).split()))


def fail(message: str) -> NoReturn:
    """End the script with `message` as one line on stderr, exit 2."""
    print(f"{Path(sys.argv[0]).name}: {message}", file=sys.stderr)
    raise SystemExit(2)


def pattern(text: str) -> "re.Pattern[str]":
    """An argument taking a regular expression over instance names, or argparse's one-line error."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r} ({exc})") from exc


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(values: list[float]) -> str:
    """`N problems, geomean G, worst W`, or `none`."""
    if not values:
        return "none"
    return f"{len(values)} problems, geomean {geomean(values):.3f}, worst {max(values):.2f}"


def best_of_first(ranked: Iterable[str], times: Mapping[str, float], k: int) -> float | None:
    """The best time among the first k of `ranked` (names) that have one, as `tune --budget k` would find;
    None when none of them verified."""
    found = [times[name] for name in list(ranked)[:k] if name in times]
    return min(found) if found else None
