"""Regret of serving untuned problems, measured on a tuning DB whose problems were tuned in full.

For every tuned problem P of the DB (one device), leave P out and ask what an untuned P would be served:
the winner of the nearest other tuned problem (factory.nearest) and the heuristic's pick. Every candidate
of P was measured when P was tuned, so the time of either choice on P is in the DB: regret = that time /
P's winner time. Problems whose choice was not measured on P (it failed there) count as unmeasured.

With --served-from OTHER.db the neighbours come from another DB instead (say the public suite and one
random seed, tuned on the same device), and every problem of `db` (another seed) is served from it whole.
The last line is what `select(mode=AUTO)` serves: the nearest choice where there is one, else the heuristic's.

    python scripts/nearest_regret.py bench/.../rand.db [--op conv_bwd_data] [--served-from suite.db]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable

from factory.device import target_for
from factory.nearest import nearest_choice
from factory.selector import heuristic_pick, problem_from_key
from regret_common import summary, tuned_db
from tuning_db import TuningDB


@dataclass(frozen=True)
class Served:
    key: str
    nearest: float | None  # regret, None: no neighbour or not measured
    heuristic: float | None
    neighbour: bool = False  # a nearest choice existed (its regret may still be unmeasured)

    @property
    def auto(self) -> float | None:
        """What an untuned problem is served: the nearest choice where one exists, else the heuristic's."""
        return self.nearest if self.neighbour else self.heuristic


class LeaveOneOut:
    """The DB seen without one problem's winner (what nearest_choice reads)."""

    def __init__(self, db: TuningDB, left_out: str) -> None:
        self.db, self.left_out = db, left_out

    def winners(self, op: str | None = None):
        return [w for w in self.db.winners(op) if w.problem_key != self.left_out]


def regrets(db: TuningDB, op: str | None, served_from: TuningDB | None = None) -> list[Served]:
    """Each tuned problem of `db` served as untuned: neighbours from `served_from`, else from `db` less it."""
    rows = []
    for winner in db.winners(op):
        problem = problem_from_key(winner.problem_key)
        times = {m.instance: m.median_us for m, _, _ in db.measurements(winner.problem_key, winner.device)
                 if m.verified and m.median_us}
        ratio: Callable[[str | None], float | None] = (
            lambda name: times[name] / winner.median_us if name in times else None)
        neighbours = served_from if served_from is not None else LeaveOneOut(db, winner.problem_key)
        # Not the package's shipped winners: they may hold the very problem (or seed) being served.
        near = nearest_choice(problem, neighbours, winner.device, shipped=False)  # type: ignore[arg-type]
        guess = heuristic_pick(problem, target=target_for(winner.device))
        rows.append(Served(winner.problem_key, ratio(near.instance.name) if near else None, ratio(guess.name),
                           near is not None))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--op")
    parser.add_argument("--served-from", metavar="DB", help="take neighbours from this tuning DB instead")
    args = parser.parse_args(argv)
    with tuned_db(args.db) as db:
        if args.served_from:
            with tuned_db(args.served_from) as other:
                rows = regrets(db, args.op, other)
        else:
            rows = regrets(db, args.op)
    for r in rows:
        near = f"{r.nearest:.2f}" if r.nearest else "-"
        heur = f"{r.heuristic:.2f}" if r.heuristic else "-"
        print(f"{near:>6} {heur:>6}  {r.key}")
    served = [r for r in rows if r.nearest is not None]
    print(f"nearest served: {summary([r.nearest for r in served])}")
    print(f"heuristic on the same problems: {summary([r.heuristic for r in served if r.heuristic])}")
    print(f"heuristic on all: {summary([r.heuristic for r in rows if r.heuristic])}")
    print(f"no servable neighbour: {len(rows) - sum(r.neighbour for r in rows)} of {len(rows)}")
    print(f"served as untuned (nearest, else heuristic): {summary([r.auto for r in rows if r.auto])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
