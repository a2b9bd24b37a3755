"""Seed a tuning DB with the winners of an earlier `kfactory bench` run, so a new run times the same kernels.

    python scripts/seed_winners.py bench/results/h100/results.json --db build/seeded.db

On a GPU machine: each row's problem and instance (renamed where instance names changed since, e.g.
split-K `_s64_` -> `_sk64_`) is recorded on this device, with the current source hash, as a verified
measurement of the earlier median. `kfactory bench --db build/seeded.db` then serves those instances
without tuning, and `kfactory bench --compare OLD NEW` shows whether the code around them got slower.
Rows whose instance no longer exists or no longer applies are listed and skipped.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from factory.backends import get_backend  # noqa: E402
from factory.catalog import CatalogError, instance_by_name  # noqa: E402
from factory.device import target_for  # noqa: E402
from factory.selector import UnreadableKey, problem_from_key  # noqa: E402
from factory.sources import hash_of  # noqa: E402
from tuning_db import Measurement, TuningDB  # noqa: E402

_OLD_SPLIT = re.compile(r"_s(\d+)_(direct|atomic|twostage)$")


def current_name(name: str) -> str:
    """An instance name as today's catalog spells it."""
    return _OLD_SPLIT.sub(r"_sk\1_\2", name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="results.json of an earlier kfactory bench run")
    parser.add_argument("--db", required=True, help="tuning DB to seed")
    args = parser.parse_args()
    rows = json.loads(Path(args.results).read_text())["rows"]
    backend = get_backend()
    device = backend.device_info()
    target = target_for(device)
    db = TuningDB(args.db)
    seeded = 0
    for row in rows:
        if row.get("status") != "ok" or not row.get("instance"):
            continue
        name = current_name(row["instance"])
        try:
            problem = problem_from_key(row["problem"])
            instance = instance_by_name(name)
        except (UnreadableKey, CatalogError) as exc:
            print(f"skip {row['case']} {row['dtype']} {row['layout']}: {exc}")
            continue
        reason = instance.why_not(problem, target)
        if reason is not None:
            print(f"skip {row['case']} {row['dtype']} {row['layout']}: {name} no longer applies: {reason}")
            continue
        measurement = Measurement(name, float(row["ours_us"]), None, int(row.get("reps") or 1), True,
                                  source_hash=hash_of(instance))
        db.record(problem.key, problem.op.value, device, [measurement])
        seeded += 1
    print(f"seeded {seeded} winners into {args.db}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
