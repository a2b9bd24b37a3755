"""Tuning database: every candidate's measurement per GPU problem, the winner per device, and tuning jobs."""

from .errors import DatabaseFileError, NewerSchemaError, NotADatabaseError, TuningDBError
from .models import SCHEMA_VERSION
from .paths import DEFAULT_DB_ENV, default_db_url
from .jobs import JobQueue, LeaseLost
from .records import (
    DbStats,
    DeviceField,
    EnqueueReport,
    ImportReport,
    Job,
    JobSpec,
    JobState,
    Lease,
    Measurement,
    Mismatch,
    QueueStatus,
    RefusedWinner,
    Winner,
    WinnerLookup,
)
from .repository import TuningDB

__all__ = [
    "DEFAULT_DB_ENV",
    "SCHEMA_VERSION",
    "DatabaseFileError",
    "DbStats",
    "DeviceField",
    "EnqueueReport",
    "ImportReport",
    "Job",
    "JobQueue",
    "JobSpec",
    "JobState",
    "Lease",
    "LeaseLost",
    "Measurement",
    "Mismatch",
    "NewerSchemaError",
    "NotADatabaseError",
    "QueueStatus",
    "RefusedWinner",
    "TuningDB",
    "TuningDBError",
    "Winner",
    "WinnerLookup",
    "default_db_url",
]
