#!/usr/bin/env python3
"""Write the winners of a tuned DB for one arch as a shipped-winners file (shipped/README.md):
python scripts/ship_winners.py --db tuned.sqlite --arch sm_90 --out shipped/sm_90.json"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from factory.problem import KernelFactoryError
from factory.shipped import winners_document
from tuning_db import TuningDB, TuningDBError
from tuning_db.paths import as_db_url
from tuning_db.transfer import write_document


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True, help="the tuned DB: SQLAlchemy URL or SQLite file")
    parser.add_argument("--arch", required=True, help="the arch whose winners ship, e.g. sm_90")
    parser.add_argument("--out", required=True, help="the JSON file to write (a new file or an earlier export)")
    args = parser.parse_args()
    if "://" not in args.db and not Path(args.db).is_file():  # opening a missing file would create an empty DB
        return _fail(f"{args.db}: no such tuning database")
    try:
        db = TuningDB(as_db_url(args.db))
        try:
            document, left_out = winners_document(db, args.arch)
        finally:
            db.close()
        if not document.winners:
            return _fail(f"{args.db}: no servable winner recorded on {args.arch}; nothing written")
        write_document(args.out, document, compact=True)
    except (TuningDBError, KernelFactoryError) as exc:
        return _fail(" ".join(str(exc).split()))
    for line in left_out:
        print(f"left out: {line}", file=sys.stderr)
    print(f"wrote {len(document.winners)} winners of {len(document.devices)} devices to {args.out}; "
          f"{len(left_out)} left out")
    return 0


def _fail(message: str) -> int:
    print(f"ship_winners: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
