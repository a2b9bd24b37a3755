"""ORM tables of the tuning database.

A change to their shape is a new Alembic revision in tuning_db/migrations/versions/ (revision
"000N" for schema version N) and SCHEMA_VERSION bumped to N; tests/test_migrations.py checks that
the revisions build exactly these tables.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

# 1: devices, measurements, winners. 2: measurements carry the source hash of the code they timed
# (results are keyed by code). 3: tuning jobs for a fleet of workers.
SCHEMA_VERSION = 3
SCHEMA_VERSION_KEY = "schema_version"

# A sha256 hex digest of an instance's rendered source.
SOURCE_HASH_LENGTH = 64

# Problem keys are indexed; 768 characters still fits a MySQL utf8mb4 index.
PROBLEM_KEY_LENGTH = 768


class UTCDateTime(TypeDecorator[datetime]):
    """Stores naive UTC and returns aware UTC, because SQLite keeps no time zone."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware")
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc)


class Base(DeclarativeBase):
    pass


class MetaRow(Base):
    """Key/value facts about the database itself (its schema version)."""

    __tablename__ = "meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))


class DeviceRow(Base):
    """A DeviceInfo, stored once and shared by every row measured on it."""

    __tablename__ = "devices"
    __table_args__ = (
        UniqueConstraint(
            "backend", "arch", "name", "sm_count", "driver_version", "compiler_version",
            name="uq_devices_identity",
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    backend: Mapped[str] = mapped_column(String(16))
    arch: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(256))
    sm_count: Mapped[int] = mapped_column(Integer)
    driver_version: Mapped[str] = mapped_column(String(64))
    compiler_version: Mapped[str] = mapped_column(String(64))


class MeasurementRow(Base):
    """Every timing ever taken, failures included, so tuning history can be audited and merged."""

    __tablename__ = "measurements"
    __table_args__ = (Index("ix_measurements_problem_device", "problem_key", "device_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    problem_key: Mapped[str] = mapped_column(String(PROBLEM_KEY_LENGTH))
    op: Mapped[str] = mapped_column(String(64))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    instance: Mapped[str] = mapped_column(String(256))
    # What was timed: NULL for rows recorded before schema 2 (unknown code, never served).
    source_hash: Mapped[str | None] = mapped_column(String(SOURCE_HASH_LENGTH))
    median_us: Mapped[float | None] = mapped_column(Float)
    spread_us: Mapped[float | None] = mapped_column(Float)
    reps: Mapped[int] = mapped_column(Integer)
    verified: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)
    gbps: Mapped[float | None] = mapped_column(Float)
    tflops: Mapped[float | None] = mapped_column(Float)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime)

    device: Mapped[DeviceRow] = relationship(lazy="joined", innerjoin=True)


class WinnerRow(Base):
    """The measurement currently served for (problem, device); one row per pair."""

    __tablename__ = "winners"
    # The unique index leads with problem_key, so it also serves lookups by problem.
    __table_args__ = (
        UniqueConstraint("problem_key", "device_id", name="uq_winners_problem_device"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    problem_key: Mapped[str] = mapped_column(String(PROBLEM_KEY_LENGTH))
    op: Mapped[str] = mapped_column(String(64))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    measurement_id: Mapped[int] = mapped_column(ForeignKey("measurements.id"))
    decided_at: Mapped[datetime] = mapped_column(UTCDateTime)

    device: Mapped[DeviceRow] = relationship(lazy="joined", innerjoin=True)
    measurement: Mapped[MeasurementRow] = relationship(lazy="joined", innerjoin=True)


class JobRow(Base):
    """A tuning job: tune one problem on one device identity at one source version, held by a lease.

    State, lease and attempts change only through tuning_db.jobs; every lease time is the database
    server's clock, so workers on machines whose clocks disagree judge leases alike.
    """

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("problem_key", "device_id", "source_version", name="uq_jobs_problem_device_source"),
        Index("ix_jobs_device_state", "device_id", "state", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    problem_key: Mapped[str] = mapped_column(String(PROBLEM_KEY_LENGTH))
    op: Mapped[str] = mapped_column(String(64))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    # sha256 over the (instance, source hash) pairs of the problem's candidates on that device.
    source_version: Mapped[str] = mapped_column(String(SOURCE_HASH_LENGTH))
    state: Mapped[str] = mapped_column(String(16))  # a JobState value
    attempts: Mapped[int] = mapped_column(Integer)  # claims so far, the current one included
    max_attempts: Mapped[int] = mapped_column(Integer)
    owner: Mapped[str | None] = mapped_column(String(256))  # the worker holding the lease
    lease_token: Mapped[str | None] = mapped_column(String(64))  # new on every claim
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    enqueued_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # the current (or last) claim
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)  # the last attempt's error
    winner_instance: Mapped[str | None] = mapped_column(String(256))  # what the finished tune served
    winner_us: Mapped[float | None] = mapped_column(Float)

    device: Mapped[DeviceRow] = relationship(lazy="joined", innerjoin=True)


TABLE_NAMES = frozenset(Base.metadata.tables)
