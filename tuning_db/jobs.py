"""Tuning jobs: enqueue, claim under a lease, renew it, complete, fail or release; the queue's state.

A job is unique per (problem, device identity, source version), so enqueueing the same problems
again, from any number of processes at once, adds nothing (INSERT ... ON CONFLICT DO NOTHING).

A claim is one statement, `UPDATE jobs ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING ...`: on PostgreSQL concurrent claimers skip each other's locked rows; on SQLite the write
transaction (BEGIN IMMEDIATE) serializes the same statement. A claim takes a pending job of the
worker's device, or a running one whose lease expired (its worker was killed, lost power or the
network), writes a new lease token and counts an attempt. Every later write of the job (renewal,
completion, failure, release) names the owner and token, so a worker whose lease was taken over
changes nothing. Lease times are the database server's clock (tuning_db.clock).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Callable, ContextManager, Iterable, Mapping, Sequence, TypeVar

from sqlalchemy import and_, case, func, literal, or_, select, true, update
from sqlalchemy.orm import Session

from factory.backends.base import DeviceInfo

from . import recording
from .clock import utc_after, utc_now
from .devices import ensure_device_id, find_device_id, to_device_info
from .errors import TuningDBError
from .models import DeviceRow, JobRow
from .records import EnqueueReport, Job, JobSpec, JobState, Lease, Measurement, QueueStatus, Winner

T = TypeVar("T")

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_LEASE_S = 60.0
THROUGHPUT_WINDOW_S = 600.0  # `kfactory jobs` rates the jobs finished in the last ten minutes
ERROR_CHARS = 4000  # a stored error is cut to this many characters
_ENQUEUE_BATCH = 500  # jobs per insert transaction: a concurrent claimer waits for one batch at most
_FAILED_SHOWN = 20

_EXPIRED_FOR_GOOD = "its worker stopped renewing the lease on every attempt (killed, crashed or cut off); last held by "


class LeaseLost(TuningDBError):
    """The job is no longer this worker's: its lease expired and another worker claimed it, or it was reset."""


Write = Callable[[Callable[[Session], T]], T]
Read = Callable[[], ContextManager[Session]]


class JobQueue:
    """The jobs of one tuning database; every method is one short transaction."""

    def __init__(self, write: Write, read: Read, location: str) -> None:
        self._write = write
        self._read = read
        self.location = location

    # -- filling the queue -----------------------------------------------------------------------
    def register(self, device: DeviceInfo) -> int:
        """The id of `device`, stored if new (a worker registers its device so jobs can name it)."""
        return self._write(lambda session: ensure_device_id(session, device)[0])

    def enqueue(self, specs: Iterable[JobSpec], max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> EnqueueReport:
        """Add a pending job per spec; one already queued (any state) is left as it is."""
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        wanted = list(dict.fromkeys(specs))
        added = 0
        for start in range(0, len(wanted), _ENQUEUE_BATCH):
            batch = wanted[start:start + _ENQUEUE_BATCH]
            added += self._write(lambda session: _insert_jobs(session, batch, max_attempts))
        return EnqueueReport(added=added, present=len(wanted) - added)

    # -- a worker's side -------------------------------------------------------------------------
    def claim(self, device: DeviceInfo, owner: str, lease_s: float = DEFAULT_LEASE_S) -> Lease | None:
        """Take the oldest claimable job of `device` under a new lease, or None when there is none.

        Expired jobs that used up their attempts are failed first, keeping the last holder's name.
        """
        token = uuid.uuid4().hex

        def work(session: Session) -> Job | None:
            device_id = find_device_id(session, device)
            if device_id is None:
                return None
            _fail_exhausted(session, device_id)
            candidate = JobRow.__table__.alias("candidate")
            claimable = (
                select(candidate.c.id)
                .where(
                    candidate.c.device_id == device_id,
                    or_(
                        candidate.c.state == JobState.PENDING.value,
                        and_(
                            candidate.c.state == JobState.RUNNING.value,
                            candidate.c.lease_expires_at < utc_now(),
                            candidate.c.attempts < candidate.c.max_attempts,
                        ),
                    ),
                )
                .order_by(candidate.c.id)
                .limit(1)
                .with_for_update(skip_locked=True)
                .scalar_subquery()
            )
            claimed = session.execute(
                update(JobRow)
                .where(JobRow.id == claimable)
                .values(
                    state=JobState.RUNNING.value,
                    owner=owner,
                    lease_token=token,
                    attempts=JobRow.attempts + 1,
                    started_at=utc_now(),
                    heartbeat_at=utc_now(),
                    lease_expires_at=utc_after(lease_s),
                    finished_at=None,
                )
                .returning(JobRow.id)
                .execution_options(synchronize_session=False)
            ).scalar()
            return None if claimed is None else _to_job(_load(session, claimed))

        job = self._write(work)
        return None if job is None else Lease(job, owner, token, lease_s)

    def renew(self, lease: Lease) -> bool:
        """Extend the lease by its length from now; False when the job is no longer this worker's."""
        return self._write(lambda session: _owned_update(session, lease, lease_expires_at=utc_after(lease.seconds),
                                                         heartbeat_at=utc_now()) == 1)

    def complete(
        self,
        lease: Lease,
        device: DeviceInfo,
        measurements: Sequence[Measurement],
        eligible: Mapping[str, str],
        since: datetime | None,
        now: datetime,
    ) -> Winner | None:
        """Store the measurements, decide the winner and mark the job done: one transaction, only if
        the job is still this worker's (else LeaseLost and nothing is stored)."""
        job = lease.job

        def work(session: Session) -> Winner | None:
            if _owned_update(session, lease, state=JobState.DONE.value, finished_at=utc_now(),
                             lease_expires_at=None, lease_token=None) != 1:
                raise LeaseLost(f"{self.location}: job {job.id} ({job.problem_key}) is no longer held by {lease.owner}")
            recording.store(session, job.problem_key, job.op, device, measurements, now)
            winner = recording.decide(session, job.problem_key, device, eligible, since, now)
            session.execute(
                update(JobRow).where(JobRow.id == job.id)
                .values(winner_instance=None if winner is None else winner.instance,
                        winner_us=None if winner is None else winner.median_us)
                .execution_options(synchronize_session=False)
            )
            return winner

        return self._write(work)

    def fail(self, lease: Lease, error: str, retry: bool = True) -> JobState:
        """Record a failed attempt: the job goes back to pending, or to failed once its attempts are
        used up (or at once when `retry` is False: trying again cannot help). Raises LeaseLost when
        the job is no longer this worker's."""
        text = error[:ERROR_CHARS]
        final = (JobRow.attempts >= JobRow.max_attempts) if retry else true()

        def work(session: Session) -> JobState:
            state = session.execute(
                update(JobRow)
                .where(*_held_by(lease))
                .values(
                    state=case((final, JobState.FAILED.value), else_=JobState.PENDING.value),
                    finished_at=case((final, utc_now()), else_=None),
                    error=text,
                    lease_token=None,
                    lease_expires_at=None,
                )
                .returning(JobRow.state)
                .execution_options(synchronize_session=False)
            ).scalar()
            if state is None:
                raise LeaseLost(f"{self.location}: job {lease.job.id} is no longer held by {lease.owner}")
            return JobState(state)

        return self._write(work)

    def release(self, lease: Lease) -> bool:
        """Give the job back untouched (the worker is stopping): pending again, the attempt not counted."""
        return self._write(lambda session: _owned_update(
            session, lease, state=JobState.PENDING.value, attempts=JobRow.attempts - 1, lease_token=None,
            lease_expires_at=None) == 1)

    def outstanding(self, device: DeviceInfo) -> int:
        """Jobs of `device` pending or running (a draining worker waits for them all)."""
        with self._read() as session:
            device_id = find_device_id(session, device)
            if device_id is None:
                return 0
            return int(session.execute(
                select(func.count()).select_from(JobRow).where(
                    JobRow.device_id == device_id,
                    JobRow.state.in_([JobState.PENDING.value, JobState.RUNNING.value]))
            ).scalar() or 0)

    # -- looking at the queue --------------------------------------------------------------------
    def job(self, job_id: int) -> Job | None:
        with self._read() as session:
            row = session.get(JobRow, job_id)
            return None if row is None else _to_job(row)

    def jobs(self, state: JobState | None = None) -> list[Job]:
        """Every job (of one state), in queue order."""
        with self._read() as session:
            query = select(JobRow).order_by(JobRow.id)
            if state is not None:
                query = query.where(JobRow.state == state.value)
            return [_to_job(row) for row in session.execute(query).scalars()]

    def devices(self) -> list[tuple[int, DeviceInfo]]:
        """Every stored device with its id (what `enqueue --device ID` names)."""
        with self._read() as session:
            rows = session.execute(select(DeviceRow).order_by(DeviceRow.id)).scalars()
            return [(row.id, to_device_info(row)) for row in rows]

    def status(self, window_s: float = THROUGHPUT_WINDOW_S) -> QueueStatus:
        """Counts per state, the running and the failed jobs, and the recent finishing rate."""
        with self._read() as session:
            now = session.execute(select(utc_now())).scalar_one()
            counts = {state: 0 for state in JobState}
            for state, n in session.execute(select(JobRow.state, func.count()).group_by(JobRow.state)):
                counts[JobState(state)] = int(n)
            running = session.execute(
                select(JobRow).where(JobRow.state == JobState.RUNNING.value).order_by(JobRow.started_at, JobRow.id)
            ).scalars()
            failed = session.execute(
                select(JobRow).where(JobRow.state == JobState.FAILED.value)
                .order_by(JobRow.finished_at.desc(), JobRow.id.desc()).limit(_FAILED_SHOWN)
            ).scalars()
            running_jobs, failed_jobs = tuple(_to_job(r) for r in running), tuple(_to_job(r) for r in failed)
            since = now - timedelta(seconds=window_s)
            recent = int(session.execute(
                select(func.count()).select_from(JobRow).where(
                    JobRow.state.in_([JobState.DONE.value, JobState.FAILED.value]), JobRow.finished_at >= since)
            ).scalar() or 0)
            first = session.execute(select(func.min(JobRow.started_at))).scalar()
        start = since if first is None else max(since, first)
        span = max(1.0, (now - start).total_seconds())
        return QueueStatus(now, counts, running_jobs, failed_jobs, recent, span)


# --- statements ------------------------------------------------------------------------------------
def _insert_jobs(session: Session, specs: Sequence[JobSpec], max_attempts: int) -> int:
    device_ids = {device: ensure_device_id(session, device)[0] for device in dict.fromkeys(s.device for s in specs)}
    table = JobRow.__table__
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise TuningDBError(f"tuning jobs need SQLite or PostgreSQL, not {dialect}")
    statement = (
        insert(table)
        .values(state=JobState.PENDING.value, attempts=0, max_attempts=max_attempts, enqueued_at=utc_now())
        .on_conflict_do_nothing()
        .returning(table.c.id)
    )
    rows = [{"problem_key": s.problem_key, "op": s.op, "device_id": device_ids[s.device],
             "source_version": s.source_version} for s in specs]
    return len(session.connection().execute(statement, rows).all())


def _held_by(lease: Lease) -> tuple:
    return (JobRow.id == lease.job.id, JobRow.owner == lease.owner, JobRow.lease_token == lease.token,
            JobRow.state == JobState.RUNNING.value)


def _owned_update(session: Session, lease: Lease, **values: object) -> int:
    """UPDATE the job only while `lease` holds it; the number of rows changed (0 or 1)."""
    result = session.execute(
        update(JobRow).where(*_held_by(lease)).values(**values).execution_options(synchronize_session=False)
    )
    return int(result.rowcount)


def _fail_exhausted(session: Session, device_id: int) -> None:
    session.execute(
        update(JobRow)
        .where(JobRow.device_id == device_id, JobRow.state == JobState.RUNNING.value,
               JobRow.lease_expires_at < utc_now(), JobRow.attempts >= JobRow.max_attempts)
        .values(state=JobState.FAILED.value, finished_at=utc_now(), lease_token=None, lease_expires_at=None,
                error=literal(_EXPIRED_FOR_GOOD) + func.coalesce(JobRow.owner, "?"))
        .execution_options(synchronize_session=False)
    )


def _load(session: Session, job_id: int) -> JobRow:
    # populate_existing: the UPDATE above bypassed the session, so a row it holds would be stale.
    return session.execute(select(JobRow).where(JobRow.id == job_id).execution_options(populate_existing=True)).scalar_one()


def _to_job(row: JobRow) -> Job:
    return Job(
        id=row.id,
        problem_key=row.problem_key,
        op=row.op,
        device_id=row.device_id,
        device=to_device_info(row.device),
        source_version=row.source_version,
        state=JobState(row.state),
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        owner=row.owner,
        enqueued_at=row.enqueued_at,
        started_at=row.started_at,
        heartbeat_at=row.heartbeat_at,
        lease_expires_at=row.lease_expires_at,
        finished_at=row.finished_at,
        error=row.error,
        winner_instance=row.winner_instance,
        winner_us=row.winner_us,
    )
