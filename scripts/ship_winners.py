#!/usr/bin/env python3
"""Write the winners of a tuned DB for one arch as a shipped-winners file (shipped/README.md):
python scripts/ship_winners.py --db tuned.sqlite --arch sm_90 --out shipped/sm_90.json"""

from __future__ import annotations

import argparse
import sys

from factory.shipped import winners_document
from tuning_db import TuningDB
from tuning_db.paths import as_db_url
from tuning_db.transfer import write_document


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True, help="the tuned DB: SQLAlchemy URL or SQLite file")
    parser.add_argument("--arch", required=True, help="the arch whose winners ship, e.g. sm_90")
    parser.add_argument("--out", required=True, help="the JSON file to write (a new file or an earlier export)")
    args = parser.parse_args()
    db = TuningDB(as_db_url(args.db))
    try:
        document, left_out = winners_document(db, args.arch)
    finally:
        db.close()
    write_document(args.out, document)
    for line in left_out:
        print(f"left out: {line}", file=sys.stderr)
    print(f"wrote {len(document.winners)} winners of {len(document.devices)} devices to {args.out}; "
          f"{len(left_out)} left out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
