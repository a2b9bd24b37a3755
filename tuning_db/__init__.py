"""Tuning database: every candidate's measurement per GPU problem, and the winner per device."""

from .errors import DatabaseFileError, NewerSchemaError, NotADatabaseError, TuningDBError
from .models import SCHEMA_VERSION
from .paths import DEFAULT_DB_ENV, default_db_url
from .records import DbStats, DeviceField, ImportReport, Measurement, Mismatch, RefusedWinner, Winner, WinnerLookup
from .repository import TuningDB

__all__ = [
    "DEFAULT_DB_ENV",
    "SCHEMA_VERSION",
    "DatabaseFileError",
    "DbStats",
    "DeviceField",
    "ImportReport",
    "Measurement",
    "Mismatch",
    "NewerSchemaError",
    "NotADatabaseError",
    "RefusedWinner",
    "TuningDB",
    "TuningDBError",
    "Winner",
    "WinnerLookup",
    "default_db_url",
]
