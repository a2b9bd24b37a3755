"""Opening a database: recognise it, refuse foreign or newer ones, create a fresh one."""

from __future__ import annotations

import sqlite3

from sqlalchemy import Connection, Engine, inspect, select, text
from sqlalchemy.exc import DBAPIError

from .engine import EngineHandle
from .errors import NewerSchemaError, NotADatabaseError, TuningDBError
from .models import SCHEMA_VERSION, SCHEMA_VERSION_KEY, TABLE_NAMES, Base, MetaRow

_NOT_A_DATABASE_MARKERS = ("file is not a database", "file is encrypted")


def open_schema(handle: EngineHandle, location: str) -> int:
    """Validate (or create) the schema and return its version; raise a one-line error otherwise."""
    try:
        with handle.reader().connect() as conn:
            version = _stored_version(conn, location)
        if version is None:
            version = _create(handle.writer(), location)
    except (DBAPIError, sqlite3.DatabaseError) as exc:
        raise _open_error(exc, location) from None
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"{location}: tuning database schema version {version} is newer than this "
            f"kernel-factory supports ({SCHEMA_VERSION}); upgrade kernel-factory or point "
            f"--db/KFACTORY_DB at another database"
        )
    if version < 1:
        raise NotADatabaseError(f"{location}: invalid tuning database schema version {version}")
    return version


def integrity_ok(engine: Engine) -> bool:
    """PRAGMA integrity_check on SQLite; other servers guard their own storage."""
    if engine.dialect.name != "sqlite":
        return True
    try:
        with engine.connect() as conn:
            rows = [row[0] for row in conn.execute(text("PRAGMA integrity_check"))]
    except (DBAPIError, sqlite3.DatabaseError):
        return False
    return rows == ["ok"]


def _stored_version(conn: Connection, location: str) -> int | None:
    tables = set(inspect(conn).get_table_names())
    if "meta" not in tables:
        if tables & TABLE_NAMES:
            raise NotADatabaseError(
                f"{location}: has tables named like a tuning database but no schema version; "
                f"point --db/KFACTORY_DB at another file"
            )
        return None
    stored = conn.execute(select(MetaRow.value).where(MetaRow.key == SCHEMA_VERSION_KEY)).scalar()
    if stored is None:
        return None
    try:
        return int(stored)
    except ValueError:
        raise NotADatabaseError(
            f"{location}: unreadable schema version {stored!r}; point --db/KFACTORY_DB at another file"
        ) from None


def _create(engine: Engine, location: str) -> int:
    # One write transaction, re-checked inside, so processes opening a fresh file together agree.
    with engine.begin() as conn:
        version = _stored_version(conn, location)
        if version is not None:
            return version
        Base.metadata.create_all(conn)
        conn.execute(MetaRow.__table__.insert().values(key=SCHEMA_VERSION_KEY, value=str(SCHEMA_VERSION)))
    return SCHEMA_VERSION


def _open_error(exc: Exception, location: str) -> TuningDBError:
    detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    if any(marker in detail for marker in _NOT_A_DATABASE_MARKERS):
        return NotADatabaseError(
            f"{location}: not an SQLite database; move it aside or point --db/KFACTORY_DB elsewhere"
        )
    return TuningDBError(f"{location}: cannot open tuning database: {detail}")
