#!/usr/bin/env python3
"""Time again, on this GPU, the stored winners whose kernel code changed since they were measured.

    python scripts/retime_changed_winners.py --db tuned.sqlite [--op conv_bwd_weight] [--reps 30]

A stored time describes the source it timed, so after a template edit the DB stops serving the winners
of that template. Each was chosen among every candidate on the old code; an edit that leaves the
instance's tiling alone (index arithmetic, an epilogue) keeps it a strong choice, so it is timed and
verified once on the new code through the tuner, as `kfactory db verify` does, recorded, and served
again. Winners whose instance left the catalog or no longer applies are listed and left alone (a
`kfactory tune --fresh` re-chooses those). Used to re-ship winners after such an edit
(shipped/README.md). Prints one line per winner timed and exits 1 if any failed verification.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from factory.api import candidate_code  # noqa: E402
from factory.backends import get_backend  # noqa: E402
from factory.device import target_for  # noqa: E402
from factory.selector import UnreadableKey, lookup, problem_from_key  # noqa: E402
from factory.sources import hash_of  # noqa: E402
from factory.tuner import TuneSettings, tune  # noqa: E402
from tuning_db import TuningDB  # noqa: E402
from tuning_db.paths import as_db_url  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True, help="the tuning DB: SQLAlchemy URL or SQLite file")
    parser.add_argument("--op", help="only winners of this op")
    parser.add_argument("--reps", type=int, default=30, help="timed repetitions (default 30)")
    args = parser.parse_args()
    if "://" not in args.db and not Path(args.db).is_file():
        print(f"{args.db}: no such tuning database", file=sys.stderr)
        return 2
    backend = get_backend()
    device = backend.device_info()
    target = target_for(device)
    settings = TuneSettings(reps=args.reps)
    db = TuningDB(as_db_url(args.db))
    timed = failed = left = 0
    try:
        for winner in db.winners(args.op):
            try:
                problem = problem_from_key(winner.problem_key)
            except UnreadableKey:
                left += 1
                print(f"left alone: {winner.problem_key}: the key does not parse")
                continue
            instance = next((c for c in lookup(problem, target=target) if c.name == winner.instance), None)
            if instance is None:
                left += 1
                print(f"left alone: {winner.problem_key}: {winner.instance} no longer applies")
                continue
            code = hash_of(instance)
            if winner.source_hash == code:
                continue
            [now] = tune(problem, [instance], backend, settings)
            now = dataclasses.replace(now, source_hash=code)
            db.record(problem.key, problem.op.value, device, [now])
            db.decide(problem.key, device, candidate_code(problem, device))
            timed += 1
            if not now.verified or now.median_us is None:
                failed += 1
                print(f"FAILED {problem.key} {instance.name}: {now.error}")
                continue
            print(f"{problem.key} {instance.name}: {winner.median_us:.1f} -> {now.median_us:.1f} us "
                  f"({winner.median_us / now.median_us:.2f}x)", flush=True)
    finally:
        db.close()
    print(f"timed {timed} winners of changed code ({failed} failed verification); {left} left alone")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
