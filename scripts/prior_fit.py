"""How well the op's prior (each family's heuristic_score) ranks the candidates of fully tuned problems.

For every problem of a tuning DB whose candidates were all timed, list the winner's family and params
next to the heuristic's pick (factory.selector.heuristic_pick), its score and its regret (its time / the
winner's time), then print the geomean and worst heuristic regret and the top-K regret: the best time
among the K candidates the prior ranks first (factory.api.rank_candidates, among those the DB measured)
over the best stored time, as `kfactory tune --budget K` would get. Run it on a training DB and a
held-out one (tune the rules on --train only; read --test's summary lines, not its rows):

    python scripts/prior_fit.py --train train.db --test test.db [--rows train|test|both|none]

The H100 DBs behind the conv_bwd_weight prior are exported in bench/results/h100-regret/ (train: the
suite and seed 21; held out: seed 22); `gunzip -k` one and `kfactory db import --db train.db FILE`.

Open copies of the databases: TuningDB may write to a file it opens.
"""

from __future__ import annotations

import argparse
import sys

from factory.api import rank_candidates
from factory.device import target_for
from factory.ops import solver_for
from factory.selector import heuristic_pick, lookup, problem_from_key
from regret_common import best_of_first, summary, tuned_db

BUDGETS = (1, 4, 8)


def fit(path: str, show_rows: bool) -> dict[str, list[float]]:
    """Per-problem regrets of the heuristic pick ("pick") and of each budget ("top1", "top4", ...)."""
    regrets: dict[str, list[float]] = {"pick": [], **{f"top{k}": [] for k in BUDGETS}}
    with tuned_db(path) as db:
        for winner in db.winners():
            problem = problem_from_key(winner.problem_key)
            target = target_for(winner.device)
            measured = {m.instance: m.median_us for m, _, _ in db.measurements(winner.problem_key, winner.device)
                        if m.verified and m.median_us}
            candidates = lookup(problem, target=target)
            by_name = {c.name: c for c in candidates}
            solver = solver_for(problem.op)
            pick = heuristic_pick(problem, candidates, target)
            if pick.name in measured:  # as scripts/nearest_regret.py: against the winner's time
                regrets["pick"].append(measured[pick.name] / winner.median_us)
            ranked = [c for c in rank_candidates(problem, candidates, target) if c.name in measured]
            best = min(measured.values())  # as scripts/budget_regret.py: against the best stored time
            for k in BUDGETS:
                found = best_of_first((c.name for c in ranked), measured, k)
                if found is not None:
                    regrets[f"top{k}"].append(found / best)
            if show_rows:
                win = by_name.get(winner.instance)
                score = solver.heuristic_score(pick.family, pick.params, problem, target)
                won = f"{win.family} {win.params.suffix()}" if win else winner.instance
                got = measured.get(pick.name)
                regret = f"{got / winner.median_us:6.2f}" if got else "     -"
                print(f"{regret}  {winner.problem_key.split(':', 1)[1]}\n"
                      f"        winner {won}\n        pick   {pick.family} {pick.params.suffix()} (score {score:.2f})")
    return regrets


def report(name: str, regrets: dict[str, list[float]]) -> None:
    print(f"{name}: heuristic pick: {summary(regrets['pick'])}")
    for k in BUDGETS:
        print(f"{name}: top-{k} regret: {summary(regrets[f'top{k}'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, metavar="DB", help="the DB the rules are fitted on")
    parser.add_argument("--test", metavar="DB", help="a held-out DB: report its summary")
    parser.add_argument("--rows", choices=("train", "test", "both", "none"), default="train",
                        help="whose per-problem rows to print (default: train only)")
    args = parser.parse_args(argv)
    results = [("train", fit(args.train, args.rows in ("train", "both")))]
    if args.test:
        results.append(("test", fit(args.test, args.rows in ("test", "both"))))
    for name, regrets in results:
        report(name, regrets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
