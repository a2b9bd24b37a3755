"""TuningDB: the one object callers use to record measurements and look winners up."""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Callable, Hashable, Iterator, Mapping, Sequence, TypeVar

from sqlalchemy import distinct, func, select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from factory.backends.base import DeviceInfo

from . import recording
from .changes import ChangeProbe
from .devices import find_device_id, mismatches, to_device_info
from .engine import EngineHandle
from .errors import CorruptDatabaseError, TuningDBError
from .jobs import JobQueue
from .merge import import_document, snapshot
from .models import DeviceRow, MeasurementRow, WinnerRow
from .paths import as_db_url, default_db_url, describe_location
from .records import DbStats, ImportReport, Measurement, RefusedWinner, Winner, WinnerLookup
from .rows import to_measurement, to_winner
from .schema import integrity_ok, open_schema
from .transfer import read_document, write_document

T = TypeVar("T")

# A concurrent first insert on a server database can violate a unique constraint, and a server may
# pick a transaction as a deadlock victim; rerunning the whole short transaction then succeeds.
_WRITE_ATTEMPTS = 3


class TuningDB:
    """Measurements and winners per (problem, device), safe for many processes on one SQLite file."""

    def __init__(self, url: str | None = None) -> None:
        self.url = default_db_url() if url is None else as_db_url(url)
        self.location = describe_location(self.url)
        self._handle = EngineHandle(self.url)
        self._probe = ChangeProbe(self.url)
        try:
            self.opened = open_schema(self._handle, self.location)
        except BaseException:
            # Release the file now; a refused database must not stay open until garbage collection.
            self._handle.dispose()
            raise

    @property
    def schema_version(self) -> int:
        return self.opened.version

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle as the URL: a child process must open its own connections.
        return (type(self), (self.url,))

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TuningDB({self.location!r})"

    def close(self) -> None:
        self._handle.dispose()
        self._probe.close()

    @property
    def jobs(self) -> JobQueue:
        """The tuning jobs kept in this database (a fleet of workers claims them)."""
        return JobQueue(self._write, self._read, self.location)

    def change_token(self) -> Hashable | None:
        """Equal tokens mean nothing was committed in between (by any process); None: cannot tell.

        Lets a caller memoize what it read (e.g. the served winner) and still see every write.
        """
        return self._probe.token()

    # -- writing -------------------------------------------------------------------------------

    def record(
        self, problem_key: str, op: str, device: DeviceInfo, measurements: Sequence[Measurement]
    ) -> Winner | None:
        """Store every measurement and re-decide the winner in the same transaction.

        Returns the winner after the call (which may be an older, faster one).
        """
        now = _utcnow()
        return self._write(lambda session: recording.store(session, problem_key, op, device, measurements, now))

    def decide(
        self,
        problem_key: str,
        device: DeviceInfo,
        eligible: Mapping[str, str],
        since: datetime | None = None,
    ) -> Winner | None:
        """Re-decide the winner from the stored measurements of `eligible` instances on `device`.

        `eligible` maps each instance to the source hash of its current code: only measurements
        of that code count. Only measurements recorded at or after `since` count when it is given
        (a fresh tune supersedes older times). The incumbent stays if it is eligible, of current
        code, recent enough and no slower; an incumbent that is not (its instance left the
        catalog, its code changed, its time predates a fresh tune) is replaced. One write
        transaction, like `record`.
        """
        now = _utcnow()
        return self._write(lambda session: recording.decide(session, problem_key, device, eligible, since, now))

    def import_json(self, path: str | os.PathLike[str]) -> ImportReport:
        """Merge an export: add unseen measurements, keep the faster winner per (problem, device)."""
        document = read_document(path)
        return import_document(document, self._write, _utcnow(), self.location)

    # -- reading -------------------------------------------------------------------------------

    def lookup(self, problem_key: str, device: DeviceInfo) -> WinnerLookup:
        """The winner recorded on exactly this device, plus the refused ones with reasons."""
        with self._read() as session:
            rows = session.execute(
                select(WinnerRow).where(WinnerRow.problem_key == problem_key).order_by(WinnerRow.id)
            ).scalars()
            served: Winner | None = None
            refused: list[RefusedWinner] = []
            for row in rows:
                winner = to_winner(row)
                differences = mismatches(winner.device, device)
                if differences:
                    refused.append(RefusedWinner(winner, tuple(differences)))
                else:
                    served = winner
        return WinnerLookup(problem_key=problem_key, winner=served, refused=tuple(refused))

    def winners(self, op: str | None = None) -> list[Winner]:
        """Every stored winner, of every device, ordered by problem; optionally of one op only."""
        with self._read() as session:
            query = select(WinnerRow)
            if op is not None:
                query = query.where(WinnerRow.op == op)
            rows = session.execute(query.order_by(WinnerRow.problem_key, WinnerRow.id)).unique().scalars()
            return [to_winner(row) for row in rows]

    def best(self, problem_key: str, device: DeviceInfo) -> Winner | None:
        return self.lookup(problem_key, device).winner

    def measurements(
        self, problem_key: str, device: DeviceInfo | None = None
    ) -> list[tuple[Measurement, DeviceInfo, datetime]]:
        """All measurements of a problem, oldest first, optionally only those on `device`."""
        with self._read() as session:
            query = select(MeasurementRow).where(MeasurementRow.problem_key == problem_key)
            if device is not None:
                device_id = find_device_id(session, device)
                if device_id is None:
                    return []
                query = query.where(MeasurementRow.device_id == device_id)
            rows = session.execute(query.order_by(MeasurementRow.recorded_at, MeasurementRow.id)).scalars()
            return [(to_measurement(r), to_device_info(r.device), r.recorded_at) for r in rows]

    def stats(self) -> DbStats:
        with self._read() as session:
            count = lambda query: int(session.execute(query).scalar() or 0)  # noqa: E731
            by_op = session.execute(
                select(WinnerRow.op, func.count()).group_by(WinnerRow.op).order_by(WinnerRow.op)
            ).all()
            return DbStats(
                url=self.location,
                schema_version=self.schema_version,
                problems=count(select(func.count(distinct(MeasurementRow.problem_key)))),
                winners=count(select(func.count()).select_from(WinnerRow)),
                measurements=count(select(func.count()).select_from(MeasurementRow)),
                failed_measurements=count(
                    select(func.count()).select_from(MeasurementRow).where(MeasurementRow.median_us.is_(None))
                ),
                devices=count(select(func.count()).select_from(DeviceRow)),
                winners_by_op={op: int(n) for op, n in by_op},
            )

    def export_json(self, path: str | os.PathLike[str]) -> int:
        """Write the whole database as JSON; returns rows written (devices + measurements + winners)."""
        with self._read() as session:
            document = snapshot(session, self.schema_version, self.location)
        write_document(path, document)
        return document.rows

    def check_integrity(self) -> bool:
        return integrity_ok(self._handle.reader())

    # -- sessions ------------------------------------------------------------------------------

    @contextmanager
    def _read(self) -> Iterator[Session]:
        try:
            with self._translate_errors(), Session(self._handle.reader()) as session, session.begin():
                yield session
        except ValueError as exc:  # a stored value no kernel-factory wrote (a non-ISO timestamp, ...)
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CorruptDatabaseError(f"{self.location}: unreadable stored value: {detail}") from exc

    def _write(self, work: Callable[[Session], T]) -> T:
        for attempt in range(_WRITE_ATTEMPTS):
            try:
                with self._translate_errors(), Session(self._handle.writer()) as session, session.begin():
                    return work(session)
            except IntegrityError:
                if attempt == _WRITE_ATTEMPTS - 1:
                    raise
            except TuningDBError as exc:
                if attempt == _WRITE_ATTEMPTS - 1 or not _transient(exc.__cause__):
                    raise
        raise AssertionError("unreachable")

    @contextmanager
    def _translate_errors(self) -> Iterator[None]:
        """Database failures become one-line TuningDBErrors; IntegrityError stays for `_write`'s retry."""
        try:
            yield
        except IntegrityError:
            raise
        except (DBAPIError, sqlite3.DatabaseError) as exc:
            detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise TuningDBError(f"{self.location}: {detail}") from exc


# SQLSTATEs of a server transaction that lost a race and may simply run again: a deadlock victim,
# a serialization failure.
_TRANSIENT_SQLSTATES = frozenset({"40P01", "40001"})


def _transient(exc: BaseException | None) -> bool:
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) in _TRANSIENT_SQLSTATES or getattr(orig, "pgcode", None) in _TRANSIENT_SQLSTATES


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)
