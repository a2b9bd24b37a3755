"""Storing measurements and deciding a winner inside a caller's transaction.

TuningDB.record / decide run these in a transaction of their own; a fleet worker runs them in the
transaction that also marks its job done, so the three land together or not at all.
"""

from __future__ import annotations

from datetime import datetime
from typing import Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from factory.backends.base import DeviceInfo

from .devices import ensure_device_id, find_device_id
from .models import MeasurementRow
from .records import Measurement, Winner
from .rows import measurement_row, to_winner
from .winners import current, fastest, offer, settle


def store(
    session: Session, problem_key: str, op: str, device: DeviceInfo, measurements: Sequence[Measurement], now: datetime
) -> Winner | None:
    """Add every measurement and offer the fastest to the winner rule; returns the winner after."""
    device_id, _ = ensure_device_id(session, device)
    rows = [measurement_row(problem_key, op, device_id, m, now) for m in measurements]
    session.add_all(rows)
    session.flush()
    best = fastest(rows)
    if best is not None:
        offer(session, best, now)
    row = current(session, problem_key, device_id)
    return None if row is None else to_winner(row)


def decide(
    session: Session,
    problem_key: str,
    device: DeviceInfo,
    eligible: Mapping[str, str],
    since: datetime | None,
    now: datetime,
) -> Winner | None:
    """Re-decide the winner from the stored measurements of `eligible` instances (see TuningDB.decide)."""

    def current_code(row: MeasurementRow) -> bool:
        return row.source_hash is not None and eligible.get(row.instance) == row.source_hash

    def stands(row: MeasurementRow) -> bool:
        return current_code(row) and (since is None or row.recorded_at >= since)

    device_id = find_device_id(session, device)
    if device_id is None:
        return None
    query = select(MeasurementRow).where(
        MeasurementRow.problem_key == problem_key,
        MeasurementRow.device_id == device_id,
        MeasurementRow.instance.in_(sorted(eligible)),
    )
    if since is not None:
        query = query.where(MeasurementRow.recorded_at >= since)
    rows = [row for row in session.execute(query).scalars() if current_code(row)]
    settle(session, rows, now, stands)
    row = current(session, problem_key, device_id)
    return None if row is None else to_winner(row)
