"""Errors raised by the tuning database, each with a one-line message a user can act on."""

from __future__ import annotations


class TuningDBError(Exception):
    """Base of every tuning database error, so callers can catch them all in one place."""


class NotADatabaseError(TuningDBError):
    """The configured location holds something other than a kernel-factory tuning database."""


class NewerSchemaError(TuningDBError):
    """The database was written by a newer kernel-factory; touching it could corrupt it."""


class DatabaseFileError(TuningDBError):
    """An export file could not be read or written, or does not have the expected shape."""


class DatabaseURLError(TuningDBError):
    """--db / $KFACTORY_DB names no database this installation can open (bad URL, missing driver, bad path)."""


class CorruptDatabaseError(TuningDBError):
    """The database opened, but holds values or references no kernel-factory wrote."""
