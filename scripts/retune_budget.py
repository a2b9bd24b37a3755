"""Tune again, as `kfactory tune --budget K` would, the problems of a tuning DB whose winner on this GPU was
decided before the prior's first K candidates were all measured: points a catalog gained since, now ranked
first, are timed and take over where faster, without a full tune of every problem.

    python scripts/retune_budget.py DB [--budget 4] [--op dwsep_conv_fwd] [--match ngchw] [--first REGEX] [--reps 25]

--first REGEX: only problems whose first K candidates hold a point whose name REGEX finds (the new points, say).

One process for every problem (no start-up a problem). Prints a line a problem tuned (old winner and time ->
new ones) and a summary. The stored measurements of this device count as they do for `kfactory tune`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from factory.api import rank_candidates, tune_problem  # noqa: E402
from factory.backends import BackendError, get_backend  # noqa: E402
from factory.cli import _enum_arg, _implemented_op, _reps  # noqa: E402
from factory.device import target_for  # noqa: E402
from factory.selector import lookup, problem_from_key  # noqa: E402
from factory.tuner import TuneSettings  # noqa: E402
from regret_common import fail, geomean, pattern, tuned_db  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--budget", type=int, default=4, help="the prior's first K candidates (default 4)")
    parser.add_argument("--op", type=_enum_arg(_implemented_op), help="only this op's problems")
    parser.add_argument("--match", default="", help="only problem keys containing this text")
    parser.add_argument("--first", type=pattern, help="only problems whose first K candidates hold a point this finds")
    parser.add_argument("--reps", type=_reps, default=TuneSettings.reps, help="timed repetitions a candidate at most")
    args = parser.parse_args(argv)
    if args.budget < 1:
        parser.error("--budget must be at least 1")
    settings = TuneSettings(reps=args.reps)
    with tuned_db(args.db) as db:
        try:
            backend = get_backend()
        except BackendError as exc:
            fail(" ".join(str(exc).split()))
        device = backend.device_info()
        target = target_for(device)
        gains: list[float] = []
        tuned = changed = 0
        stale = [w for w in db.winners(args.op.value if args.op else None) if w.device == device and args.match in w.problem_key]
        for number, old in enumerate(stale, 1):
            problem = problem_from_key(old.problem_key)
            measured = {m.instance for m, _, _ in db.measurements(old.problem_key, device)}
            first = rank_candidates(problem, lookup(problem, target=target), target)[:args.budget]
            if all(c.name in measured for c in first) or (args.first and not any(args.first.search(c.name) for c in first)):
                continue
            outcome = tune_problem(problem, backend, db, settings, budget=args.budget)
            tuned += 1
            new = outcome.winner
            if new is None:
                print(f"[{number}/{len(stale)}] {old.problem_key}: no winner after the tune", flush=True)
                continue
            gains.append(old.median_us / new.median_us)
            changed += new.instance != old.instance
            print(f"[{number}/{len(stale)}] {old.median_us:8.1f} -> {new.median_us:8.1f} us  {old.instance} -> "
                  f"{new.instance}  {old.problem_key}", flush=True)
    if not tuned:
        held = " or held no point --first finds" if args.first else ""
        print(f"0 problems tuned again: every problem's first {args.budget} candidates were measured already{held}")
        return 0
    ratios = f"; old / new time geomean {geomean(gains):.3f}, best {max(gains):.2f}" if gains else ""
    print(f"{tuned} problems tuned again, {changed} with a new winner{ratios}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
