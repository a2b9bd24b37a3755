"""Export and import: a whole database as a transfer document, and merging one back in."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Sequence, TypeVar

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from factory.backends.base import DeviceInfo

from .devices import ensure_device_id, to_device_info
from .errors import CorruptDatabaseError
from .models import DeviceRow, MeasurementRow, WinnerRow
from .records import ImportReport
from .rows import measurement_row, to_measurement
from .transfer import TransferDocument, TransferMeasurement, TransferWinner
from .winners import Outcome, offer

T = TypeVar("T")

# What identifies one measurement across databases: nothing else is unique to a timing run.
MeasurementKey = tuple[str, int, str, "float | None", datetime]

# Rows per import transaction: each holds SQLite's write lock for milliseconds, so a concurrent
# writer never waits anywhere near the busy timeout, however large the import.
BATCH_ROWS = 2000

# Runs one function in one write transaction (TuningDB._write).
Writer = Callable[[Callable[[Session], T]], T]


def snapshot(session: Session, schema_version: int, location: str = "database") -> TransferDocument:
    """Every device, measurement and winner, with ids replaced by positions in the document.

    Rows that refer to a missing device or measurement would silently drop out of the export (the
    ORM joins them); the export is refused instead, naming how many.
    """
    _refuse_orphans(session, location)
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


def _guarded(write: Writer, location: str) -> Writer:
    """`write` whose ValueErrors (a stored value SQLAlchemy cannot read back) name the database."""

    def guarded(work: Callable[[Session], T]) -> T:
        try:
            return write(work)
        except ValueError as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CorruptDatabaseError(f"{location}: unreadable stored value: {detail}") from exc

    return guarded


def _refuse_orphans(session: Session, location: str, consequence: str = "nothing exported") -> None:
    devices = select(DeviceRow.id)
    measurements = select(MeasurementRow.id)
    orphans = {
        "measurements refer to a missing device": session.execute(
            select(func.count()).select_from(MeasurementRow).where(MeasurementRow.device_id.not_in(devices))
        ).scalar_one(),
        "winners refer to a missing device or measurement": session.execute(
            select(func.count()).select_from(WinnerRow).where(
                WinnerRow.device_id.not_in(devices) | WinnerRow.measurement_id.not_in(measurements)
            )
        ).scalar_one(),
    }
    found = [f"{n} {what}" for what, n in orphans.items() if n]
    if found:
        raise CorruptDatabaseError(f"{location}: {'; '.join(found)}; {consequence} (the database is damaged)")


@dataclass(frozen=True)
class _Batch:
    """What one measurement batch resolved: stored row ids in document order, and how many it added."""

    ids: tuple[int, ...]
    added: int
    seen: Counter[MeasurementKey]


def import_document(
    document: TransferDocument, write: Writer, now: datetime, location: str = "database"
) -> ImportReport:
    """Merge `document` in short transactions of at most BATCH_ROWS rows each.

    Devices first, then measurements not stored yet, then each imported winner offered to the winner
    rule. Every batch commits whole; an interrupted import leaves whole batches, and running it again
    adds only what is missing (measurements are matched, not appended twice).
    """
    write = _guarded(write, location)
    write(lambda session: _refuse_orphans(session, location, "nothing imported"))
    device_ids, devices_added = write(lambda session: _ensure_devices(session, document.devices))
    seen: Counter[MeasurementKey] = Counter()
    ids: list[int] = []
    added = 0
    for start in range(0, len(document.measurements), BATCH_ROWS):
        chunk = document.measurements[start:start + BATCH_ROWS]
        batch = write(lambda session: _merge_measurements(session, chunk, device_ids, seen))
        ids.extend(batch.ids)
        added += batch.added
        seen = batch.seen
    outcomes: Counter[Outcome] = Counter()
    for start in range(0, len(document.winners), BATCH_ROWS):
        chunk_w = document.winners[start:start + BATCH_ROWS]
        outcomes += write(lambda session: _offer_winners(session, chunk_w, ids, now))
    return ImportReport(
        measurements_added=added,
        measurements_present=len(document.measurements) - added,
        devices_added=devices_added,
        winners_added=outcomes[Outcome.ADDED],
        winners_replaced=outcomes[Outcome.REPLACED],
        winners_kept=outcomes[Outcome.KEPT],
    )


def _ensure_devices(session: Session, devices: Sequence[DeviceInfo]) -> tuple[list[int], int]:
    ids: list[int] = []
    inserted = 0
    for device in devices:
        device_id, new = ensure_device_id(session, device)
        ids.append(device_id)
        inserted += new
    return ids, inserted


def _merge_measurements(
    session: Session, chunk: Sequence[TransferMeasurement], device_ids: Sequence[int], seen: Counter[MeasurementKey]
) -> _Batch:
    """Insert the measurements of `chunk` not stored yet; `seen` counts the keys of earlier chunks.

    The n-th copy of a key in the document matches the n-th stored copy (a multiset), so importing
    twice adds nothing and importing into an empty database adds every row. `seen` is copied, so a
    retried transaction starts from the same counts.
    """
    seen = Counter(seen)
    stored = _stored_ids(session, {device_ids[item.device] for item in chunk}, {item.problem_key for item in chunk})
    resolved: list[int | MeasurementRow] = []
    for item in chunk:
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
    ids = tuple(entry if isinstance(entry, int) else entry.id for entry in resolved)
    return _Batch(ids, sum(isinstance(entry, MeasurementRow) for entry in resolved), seen)


def _offer_winners(session: Session, chunk: Sequence[TransferWinner], ids: Sequence[int], now: datetime) -> Counter[Outcome]:
    outcomes: Counter[Outcome] = Counter()
    for winner in chunk:
        candidate = session.get(MeasurementRow, ids[winner.measurement])
        if candidate is None:  # removed by another writer between the batches
            outcomes[Outcome.KEPT] += 1
            continue
        outcomes[offer(session, candidate, now)] += 1
    return outcomes


def measurement_key(
    problem_key: str, device_id: int, instance: str, median_us: float | None, at: datetime
) -> MeasurementKey:
    # SQLite stores NaN as NULL, so both mean "no time" for de-duplication.
    median = None if median_us is None or math.isnan(median_us) else median_us
    return (problem_key, device_id, instance, median, at)


def _stored_ids(
    session: Session, device_ids: set[int], problem_keys: set[str]
) -> defaultdict[MeasurementKey, list[int]]:
    stored: defaultdict[MeasurementKey, list[int]] = defaultdict(list)
    if not device_ids or not problem_keys:
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
        .where(MeasurementRow.device_id.in_(device_ids), MeasurementRow.problem_key.in_(problem_keys))
        .order_by(MeasurementRow.id)
    )
    for row_id, problem_key, device_id, instance, median_us, recorded_at in rows:
        stored[measurement_key(problem_key, device_id, instance, median_us, recorded_at)].append(row_id)
    return stored
