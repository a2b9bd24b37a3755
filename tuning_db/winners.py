"""The winner rule: the fastest verified measurement wins, and only a strictly faster one replaces it."""

from __future__ import annotations

import enum
import math
from datetime import datetime
from typing import Callable, Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from .models import MeasurementRow, WinnerRow


class Outcome(enum.Enum):
    ADDED = "added"
    REPLACED = "replaced"
    KEPT = "kept"


def can_win(verified: bool, median_us: float | None) -> bool:
    """Only a verified, finite, positive time may be served: a fast wrong kernel is worse than a slow one,
    and a time of 0 would beat every real one forever."""
    return verified and median_us is not None and math.isfinite(median_us) and median_us > 0.0


def fastest(rows: Iterable[MeasurementRow]) -> MeasurementRow | None:
    """The fastest row that may win, or None when none may."""
    eligible = [row for row in rows if can_win(row.verified, row.median_us)]
    return min(eligible, key=lambda row: row.median_us or 0.0, default=None)


def current(session: Session, problem_key: str, device_id: int, *, for_update: bool = False) -> WinnerRow | None:
    query = select(WinnerRow).where(WinnerRow.problem_key == problem_key, WinnerRow.device_id == device_id)
    if for_update:
        # Row lock on server databases; SQLite already holds the write lock (BEGIN IMMEDIATE). Only the
        # winner's row: the eagerly joined device and measurement rows stay unlocked, or writers of other
        # problems on one device (which hold key-share locks on its row through their inserts) deadlock.
        query = query.with_for_update(of=WinnerRow)
    return session.execute(query).unique().scalar_one_or_none()


def offer(session: Session, candidate: MeasurementRow, now: datetime) -> Outcome:
    """Make `candidate` the winner of its (problem, device) if it beats the stored one."""
    if not can_win(candidate.verified, candidate.median_us):
        return Outcome.KEPT
    return _install(session, candidate, now, incumbent_stands=lambda row: True)


def settle(
    session: Session,
    rows: Iterable[MeasurementRow],
    now: datetime,
    incumbent_stands: Callable[[MeasurementRow], bool],
) -> Outcome:
    """Re-decide a winner from `rows` (one problem and device).

    The fastest eligible row wins unless the incumbent still stands (`incumbent_stands`: it may
    be served and belongs to the evidence considered) and is no slower. An incumbent that no
    longer stands is replaced even by a slower row: a stale time must not block fresh results.
    """
    best = fastest(rows)
    if best is None:
        return Outcome.KEPT
    return _install(session, best, now, incumbent_stands)


def _install(
    session: Session, candidate: MeasurementRow, now: datetime, incumbent_stands: Callable[[MeasurementRow], bool]
) -> Outcome:
    assert candidate.median_us is not None
    existing = current(session, candidate.problem_key, candidate.device_id, for_update=True)
    if existing is None:
        session.add(
            WinnerRow(
                problem_key=candidate.problem_key,
                op=candidate.op,
                device_id=candidate.device_id,
                measurement=candidate,
                decided_at=now,
            )
        )
        session.flush()
        return Outcome.ADDED
    if existing.measurement_id == candidate.id:
        return Outcome.KEPT
    incumbent = existing.measurement
    if incumbent_stands(incumbent) and incumbent.median_us is not None and incumbent.median_us <= candidate.median_us:
        return Outcome.KEPT
    existing.measurement = candidate
    existing.op = candidate.op
    existing.decided_at = now
    session.flush()
    return Outcome.REPLACED
