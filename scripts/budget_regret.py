"""Regret of `kfactory tune --budget K`, measured on a tuning DB whose problems were tuned in full.

Every candidate of every problem was timed there, so the best of the K candidates the prior ranks first
(factory.api.rank_candidates, among those the DB measured) is known without the GPU: regret = that time /
the best stored time. A problem none of whose first K candidates verified counts as missing.

    python scripts/budget_regret.py bench/.../rand.db [--budgets 1,2,4,8,16,32] [--spills-last]

--spills-last ranks, within the prior's order, the candidates whose compiled binary spills (as the compile
cache on this machine recorded it: run where the DB was tuned) after those that do not, to measure
whether the compiler's figures should enter the prior.
"""

from __future__ import annotations

import argparse
import sys

from factory.api import rank_candidates
from factory.compile_cache import CompileJob, cached_resources
from factory.device import target_for
from factory.sources import source_of
from factory.selector import lookup, problem_from_key
from regret_common import best_of_first, summary, tuned_db


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--budgets", type=_budgets, default="1,2,4,8,16,32",
                        help="comma-separated candidate counts (default 1,2,4,8,16,32)")
    parser.add_argument("--spills-last", action="store_true", help="rank spilling candidates after the others")
    parser.add_argument("--worst", type=_count, default=0, metavar="N",
                        help="also list the N problems the smallest budget serves worst: its pick and the winner")
    args = parser.parse_args(argv)
    budgets: list[int] = args.budgets
    regrets: dict[int, list[float]] = {k: [] for k in budgets}
    missing = {k: 0 for k in budgets}
    sizes = []
    first_picks: list[tuple[float, str, str, str]] = []  # (regret, problem, the smallest budget's pick, winner)
    with tuned_db(args.db) as db:
        for winner in db.winners():
            problem = problem_from_key(winner.problem_key)
            target = target_for(winner.device)
            measured = {m.instance: m for m, _, _ in db.measurements(winner.problem_key, winner.device)}
            # Candidates the DB never measured (added to the catalog since) are left out of the ranking.
            ranked = [c for c in rank_candidates(problem, lookup(problem, target=target), target) if c.name in measured]
            if args.spills_last:
                ranked.sort(key=lambda c: spills(c, winner.device))  # stable: the prior's order within each group
            times = {name: m.median_us for name, m in measured.items() if m.verified and m.median_us}
            best = min(times.values())  # the best stored time (the winner, unless the DB lost a later row)
            sizes.append(len(ranked))
            picked = [c.name for c in ranked[:budgets[0]] if c.name in times]
            if picked:
                pick = min(picked, key=times.__getitem__)
                first_picks.append((times[pick] / best, winner.problem_key, pick, min(times, key=times.__getitem__)))
            for k in budgets:
                found = best_of_first((c.name for c in ranked), times, k)
                if found is not None:
                    regrets[k].append(found / best)
                else:
                    missing[k] += 1
    if not sizes:
        print(f"{args.db}: no tuned problem")
        return 0
    print(f"{len(sizes)} problems, {sorted(sizes)[len(sizes) // 2]} candidates each (median), {max(sizes)} at most")
    for k in budgets:
        print(f"budget {k:3d}: {summary(regrets[k])}; no verified candidate among them: {missing[k]}")
    for regret, key, pick, best_name in sorted(first_picks, reverse=True)[:args.worst]:
        print(f"{regret:.2f}x {key}\n      budget {budgets[0]} picks {pick}\n      the winner is {best_name}")
    return 0


def _budgets(text: str) -> list[int]:
    try:
        budgets = [int(b) for b in text.split(",")]
    except ValueError:
        budgets = []
    if not budgets or min(budgets) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated whole numbers of candidates, each >= 1")
    return budgets


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of problems, >= 0")
    return int(text)


def spills(candidate, device) -> bool:
    """Whether the compile cache records that this candidate's binary for `device` spills (unknown: no)."""
    job = CompileJob(candidate.name, source_of(candidate).text, candidate.compile_arch(device.arch))
    figures = cached_resources(device.backend, job)
    return figures is not None and figures.spill_bytes > 0


if __name__ == "__main__":
    sys.exit(main())
