"""The job queue of the tuning DB on SQLite and on a real PostgreSQL server: enqueue without duplicates,
claims in one statement under a lease on the server's clock, renewals, completion that stores
measurements, winner and state together only while the lease is held, failures with attempts, release,
expired leases taken over, and processes claiming at once (tests/test_fleet.py enqueues from several processes at once)."""

from __future__ import annotations

import dataclasses
import multiprocessing
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import event, select

from factory.backends.base import BackendKind, DeviceInfo
from tuning_db import JobSpec, JobState, LeaseLost, Measurement, TuningDB
from tuning_db.clock import utc_after, utc_now

DEVICE = DeviceInfo(BackendKind.CUDA, "sm_90", "NVIDIA H100 80GB HBM3", 132, "550.54.15", "12.4.131")
OTHER = dataclasses.replace(DEVICE, driver_version="560.28.03")
SOURCE = "5" * 64
SPAWN = multiprocessing.get_context("spawn")


def spec(i: int, device: DeviceInfo = DEVICE, source: str = SOURCE) -> JobSpec:
    return JobSpec(f"conv_bwd_weight:NHWGC:fp16:1d:N={i}", "conv_bwd_weight", device, source)


def ok(instance: str, us: float) -> Measurement:
    return Measurement(instance, us, 0.1, 25, True, source_hash="c" * 64)


CODE = {"a": "c" * 64, "b": "c" * 64}


@pytest.fixture
def db(db_url: str):
    with TuningDB(db_url) as opened:
        yield opened


# --- the clock ------------------------------------------------------------------------------------
def test_the_servers_clock_is_utc_and_leases_order_as_times(db: TuningDB) -> None:
    with db._read() as session:
        now, later, much_later = session.execute(select(utc_now(), utc_after(1.5), utc_after(12.25))).one()
    here = datetime.now(timezone.utc)
    assert abs((now - here).total_seconds()) < 5
    assert timedelta(seconds=1.4) < later - now < timedelta(seconds=1.6)
    assert timedelta(seconds=12.1) < much_later - now < timedelta(seconds=12.4)


# --- enqueue ----------------------------------------------------------------------------------------
def test_enqueue_ignores_duplicates_per_problem_device_and_source(db: TuningDB) -> None:
    first = db.jobs.enqueue([spec(i) for i in range(5)])
    assert (first.added, first.present) == (5, 0)
    again = db.jobs.enqueue([spec(i) for i in range(7)] + [spec(1)])
    assert (again.added, again.present) == (2, 5)
    other = db.jobs.enqueue([spec(0, device=OTHER), spec(0, source="6" * 64)])
    assert (other.added, other.present) == (2, 0)
    jobs = db.jobs.jobs()
    assert len(jobs) == 9 and all(j.state is JobState.PENDING and j.attempts == 0 for j in jobs)
    assert [j.problem_key for j in jobs[:7]] == [spec(i).problem_key for i in range(7)]
    assert jobs[-2].device == OTHER and jobs[-1].source_version == "6" * 64


# --- claims, leases, completion ------------------------------------------------------------------
def test_claims_take_the_oldest_job_of_their_device_once(db: TuningDB) -> None:
    db.jobs.enqueue([spec(0, device=OTHER), spec(1), spec(2)])
    first = db.jobs.claim(DEVICE, "w1", 30)
    second = db.jobs.claim(DEVICE, "w2", 30)
    assert (first.job.problem_key, second.job.problem_key) == (spec(1).problem_key, spec(2).problem_key)
    assert db.jobs.claim(DEVICE, "w3", 30) is None  # the other device's job is not this worker's
    job = db.jobs.job(first.job.id)
    assert job.state is JobState.RUNNING and job.owner == "w1" and job.attempts == 1
    assert timedelta(seconds=29) < job.lease_expires_at - job.started_at <= timedelta(seconds=31)
    assert db.jobs.claim(dataclasses.replace(DEVICE, name="never seen"), "w4") is None


def test_renewal_extends_the_lease_only_for_its_holder(db: TuningDB) -> None:
    db.jobs.enqueue([spec(1)])
    lease = db.jobs.claim(DEVICE, "w1", 5)
    before = db.jobs.job(lease.job.id).lease_expires_at
    time.sleep(0.05)
    assert db.jobs.renew(lease)
    assert db.jobs.job(lease.job.id).lease_expires_at > before
    assert not db.jobs.renew(dataclasses.replace(lease, token="forged"))


def test_completion_stores_measurements_winner_and_state_together(db: TuningDB) -> None:
    db.jobs.enqueue([spec(1)])
    lease = db.jobs.claim(DEVICE, "w1", 30)
    winner = db.jobs.complete(lease, DEVICE, [ok("a", 3.0), ok("b", 2.0)], CODE, None, datetime.now(timezone.utc))
    assert winner.instance == "b"
    job = db.jobs.job(lease.job.id)
    assert job.state is JobState.DONE and job.winner_instance == "b" and job.winner_us == 2.0
    assert job.finished_at is not None and job.lease_expires_at is None
    assert db.best(spec(1).problem_key, DEVICE).instance == "b"
    assert not db.jobs.renew(lease)  # a finished job is no one's
    with pytest.raises(LeaseLost):
        db.jobs.complete(lease, DEVICE, [ok("a", 1.0)], CODE, None, datetime.now(timezone.utc))
    assert len(db.measurements(spec(1).problem_key)) == 2


def test_an_expired_lease_is_taken_over_and_the_old_holder_stores_nothing(db: TuningDB) -> None:
    db.jobs.enqueue([spec(1)])
    stale = db.jobs.claim(DEVICE, "killed", 0.2)
    assert db.jobs.claim(DEVICE, "other", 30) is None  # still leased
    time.sleep(0.4)
    fresh = db.jobs.claim(DEVICE, "other", 30)
    assert fresh.job.id == stale.job.id and fresh.job.attempts == 2 and fresh.token != stale.token
    assert not db.jobs.renew(stale)
    with pytest.raises(LeaseLost):
        db.jobs.complete(stale, DEVICE, [ok("a", 1.0)], CODE, None, datetime.now(timezone.utc))
    with pytest.raises(LeaseLost):
        db.jobs.fail(stale, "boom")
    assert db.measurements(spec(1).problem_key) == [] and db.best(spec(1).problem_key, DEVICE) is None
    db.jobs.complete(fresh, DEVICE, [ok("a", 1.0)], CODE, None, datetime.now(timezone.utc))
    job = db.jobs.job(fresh.job.id)
    assert (job.state, job.attempts, job.owner) == (JobState.DONE, 2, "other")


def test_the_final_write_rolls_back_when_the_lease_is_lost_inside_it(db: TuningDB) -> None:
    """Taken over between the measurements' insert and the commit: nothing of it stays."""
    db.jobs.enqueue([spec(1)])
    lease = db.jobs.claim(DEVICE, "w1", 30)
    with pytest.raises(LeaseLost):
        db.jobs.complete(dataclasses.replace(lease, owner="impostor"), DEVICE, [ok("a", 1.0)], CODE, None,
                         datetime.now(timezone.utc))
    assert db.measurements(spec(1).problem_key) == []
    assert db.jobs.job(lease.job.id).state is JobState.RUNNING


def test_failures_requeue_until_the_attempts_are_used_up(db: TuningDB) -> None:
    db.jobs.enqueue([spec(1)], max_attempts=2)
    first = db.jobs.claim(DEVICE, "w1", 30)
    assert db.jobs.fail(first, "launch: out of memory") is JobState.PENDING
    job = db.jobs.job(first.job.id)
    assert (job.state, job.attempts, job.error) == (JobState.PENDING, 1, "launch: out of memory")
    second = db.jobs.claim(DEVICE, "w2", 30)
    assert second.job.attempts == 2
    assert db.jobs.fail(second, "launch: out of memory again") is JobState.FAILED
    job = db.jobs.job(first.job.id)
    assert (job.state, job.attempts, job.error) == (JobState.FAILED, 2, "launch: out of memory again")
    assert db.jobs.claim(DEVICE, "w3", 30) is None


def test_a_failure_retrying_cannot_fix_fails_at_once(db: TuningDB) -> None:
    db.jobs.enqueue([spec(1)])
    lease = db.jobs.claim(DEVICE, "w1", 30)
    assert db.jobs.fail(lease, "stale source version", retry=False) is JobState.FAILED
    assert db.jobs.job(lease.job.id).attempts == 1


def test_a_job_whose_workers_keep_dying_fails_with_the_last_holder_named(db: TuningDB) -> None:
    db.jobs.enqueue([spec(1)], max_attempts=2)
    db.jobs.claim(DEVICE, "first", 0.1)
    time.sleep(0.25)
    db.jobs.claim(DEVICE, "second", 0.1)
    time.sleep(0.25)
    assert db.jobs.claim(DEVICE, "third", 30) is None
    [job] = db.jobs.jobs()
    assert job.state is JobState.FAILED and job.attempts == 2
    assert "stopped renewing the lease" in job.error and job.error.endswith("second")


def test_release_gives_the_job_back_without_using_an_attempt(db: TuningDB) -> None:
    db.jobs.enqueue([spec(1)])
    lease = db.jobs.claim(DEVICE, "w1", 30)
    assert db.jobs.release(lease)
    job = db.jobs.job(lease.job.id)
    assert (job.state, job.attempts) == (JobState.PENDING, 0)
    assert not db.jobs.release(lease)
    assert db.jobs.claim(DEVICE, "w2", 30).job.attempts == 1


def test_status_counts_states_running_workers_and_the_rate(db: TuningDB) -> None:
    db.jobs.enqueue([spec(i) for i in range(6)], max_attempts=1)
    done = [db.jobs.claim(DEVICE, f"w{i}", 30) for i in range(3)]
    for lease in done[:2]:
        db.jobs.complete(lease, DEVICE, [ok("a", 1.0)], CODE, None, datetime.now(timezone.utc))
    db.jobs.fail(done[2], "verify: nothing")
    running = db.jobs.claim(DEVICE, "busy", 30)
    status = db.jobs.status()
    assert status.counts == {JobState.PENDING: 2, JobState.RUNNING: 1, JobState.DONE: 2, JobState.FAILED: 1}
    assert status.total == 6 and status.remaining == 3
    assert [j.owner for j in status.running] == ["busy"] and status.running[0].id == running.job.id
    assert [j.error for j in status.failed] == ["verify: nothing"]
    assert status.finished_recently == 3 and status.per_minute is not None and status.eta_s is not None
    assert status.eta_s == pytest.approx(3 * 60.0 / status.per_minute)
    assert db.jobs.outstanding(DEVICE) == 3


def test_a_claim_is_one_statement(db: TuningDB) -> None:
    db.jobs.enqueue([spec(1)])
    statements: list[str] = []
    engine = db._handle.writer()
    listener = lambda conn, cur, stmt, *rest: statements.append(stmt)  # noqa: E731
    event.listen(engine, "before_cursor_execute", listener)
    try:
        db.jobs.claim(DEVICE, "w1", 30)
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    [claim] = [s for s in statements if s.lstrip().upper().startswith("UPDATE JOBS") and "RETURNING" in s.upper()]
    assert "LIMIT" in claim.upper() and "attempts + " in claim.lower()
    if engine.dialect.name == "postgresql":
        assert "FOR UPDATE SKIP LOCKED" in claim.upper()


# --- many processes at once -------------------------------------------------------------------------
CLAIMERS = 4
QUEUED = 80


def claim_all(url: str, worker: int, start: Any, results: Any) -> None:
    claimed: list[int] = []
    error = None
    try:
        with TuningDB(url) as db:
            start.wait()  # every process has its database open: they start claiming together
            while (lease := db.jobs.claim(DEVICE, f"w{worker}", 60)) is not None:
                claimed.append(lease.job.id)
                db.jobs.complete(lease, DEVICE, [], {}, None, datetime.now(timezone.utc))
                time.sleep(0.002)  # as a worker tunes between claims: on few cores one process would take all
    except BaseException as exc:  # reported to the parent
        error = f"{type(exc).__name__}: {exc}"
    results.put((worker, claimed, error))


def _together(target: Any, url: str, count: int) -> list[tuple[int, Any, str | None]]:
    start, results = SPAWN.Barrier(count, timeout=60), SPAWN.Queue()
    procs = [SPAWN.Process(target=target, args=(url, w, start, results)) for w in range(count)]
    for p in procs:
        p.start()
    reports = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert [r[2] for r in reports] == [None] * count
    return reports


def test_processes_claiming_at_once_take_each_job_exactly_once(db: TuningDB, db_url: str) -> None:
    db.jobs.enqueue([spec(i) for i in range(QUEUED)])
    reports = _together(claim_all, db_url, CLAIMERS)
    claimed = [job for _, jobs, _ in reports for job in jobs]
    assert sorted(claimed) == sorted(j.id for j in db.jobs.jobs())
    jobs = db.jobs.jobs()
    assert all(j.state is JobState.DONE and j.attempts == 1 for j in jobs)
    assert sum(1 for _, mine, _ in reports if mine) >= 2, "one process took everything: no contention tested"

