"""Export and import: a whole database as a transfer document, and merging one back in."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from .devices import ensure_device_id, to_device_info
from .models import DeviceRow, MeasurementRow, WinnerRow
from .records import ImportReport
from .rows import measurement_row, to_measurement
from .transfer import TransferDocument, TransferMeasurement, TransferWinner
from .winners import Outcome, offer

# What identifies one measurement across databases: nothing else is unique to a timing run.
MeasurementKey = tuple[str, int, str, "float | None", datetime]


def snapshot(session: Session, schema_version: int) -> TransferDocument:
    """Every device, measurement and winner, with ids replaced by positions in the document."""
    devices = session.execute(select(DeviceRow).order_by(DeviceRow.id)).scalars().all()
    device_index = {row.id: i for i, row in enumerate(devices)}
    measurements = session.execute(select(MeasurementRow).order_by(MeasurementRow.id)).scalars().all()
    measurement_index = {row.id: i for i, row in enumerate(measurements)}
    winners = session.execute(select(WinnerRow).order_by(WinnerRow.id)).scalars().all()
    return TransferDocument(
        schema_version=schema_version,
        devices=tuple(to_device_info(row) for row in devices),
        measurements=tuple(
            TransferMeasurement(
                problem_key=row.problem_key,
                op=row.op,
                device=device_index[row.device_id],
                measurement=to_measurement(row),
                recorded_at=row.recorded_at,
            )
            for row in measurements
        ),
        winners=tuple(
            TransferWinner(
                problem_key=row.problem_key,
                op=row.op,
                device=device_index[row.device_id],
                measurement=measurement_index[row.measurement_id],
            )
            for row in winners
        ),
    )


def merge(session: Session, document: TransferDocument, now: datetime) -> ImportReport:
    """Add the measurements not stored yet, then offer each imported winner to the winner rule."""
    device_ids: list[int] = []
    devices_added = 0
    for device in document.devices:
        device_id, inserted = ensure_device_id(session, device)
        device_ids.append(device_id)
        devices_added += inserted

    stored = _stored_ids(session, set(device_ids))
    # The n-th copy of a key in the document matches the n-th stored copy (a multiset), so
    # importing twice adds nothing and importing into an empty database adds every row.
    seen: Counter[MeasurementKey] = Counter()
    resolved: list[int | MeasurementRow] = []
    for item in document.measurements:
        device_id = device_ids[item.device]
        m = item.measurement
        key = measurement_key(item.problem_key, device_id, m.instance, m.median_us, item.recorded_at)
        copy = seen[key]
        seen[key] += 1
        if copy < len(stored[key]):
            resolved.append(stored[key][copy])
        else:
            row = measurement_row(item.problem_key, item.op, device_id, m, item.recorded_at)
            session.add(row)
            resolved.append(row)
    session.flush()
    ids = [entry if isinstance(entry, int) else entry.id for entry in resolved]
    added = sum(isinstance(entry, MeasurementRow) for entry in resolved)

    outcomes = Counter[Outcome]()
    for winner in document.winners:
        candidate = session.get(MeasurementRow, ids[winner.measurement])
        assert candidate is not None
        outcomes[offer(session, candidate, now)] += 1

    return ImportReport(
        measurements_added=added,
        measurements_present=len(document.measurements) - added,
        devices_added=devices_added,
        winners_added=outcomes[Outcome.ADDED],
        winners_replaced=outcomes[Outcome.REPLACED],
        winners_kept=outcomes[Outcome.KEPT],
    )


def measurement_key(
    problem_key: str, device_id: int, instance: str, median_us: float | None, at: datetime
) -> MeasurementKey:
    # SQLite stores NaN as NULL, so both mean "no time" for de-duplication.
    median = None if median_us is None or math.isnan(median_us) else median_us
    return (problem_key, device_id, instance, median, at)


def _stored_ids(session: Session, device_ids: set[int]) -> defaultdict[MeasurementKey, list[int]]:
    stored: defaultdict[MeasurementKey, list[int]] = defaultdict(list)
    if not device_ids:
        return stored
    rows = session.execute(
        select(
            MeasurementRow.id,
            MeasurementRow.problem_key,
            MeasurementRow.device_id,
            MeasurementRow.instance,
            MeasurementRow.median_us,
            MeasurementRow.recorded_at,
        )
        .where(MeasurementRow.device_id.in_(device_ids))
        .order_by(MeasurementRow.id)
    )
    for row_id, problem_key, device_id, instance, median_us, recorded_at in rows:
        stored[measurement_key(problem_key, device_id, instance, median_us, recorded_at)].append(row_id)
    return stored
