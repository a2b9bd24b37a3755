"""Opening a database: recognise it, refuse foreign or newer ones, create a fresh one, upgrade an older one."""

from __future__ import annotations

import sqlite3
from typing import Callable

from sqlalchemy import Connection, Engine, inspect, select, text, update
from sqlalchemy.exc import DBAPIError

from .engine import EngineHandle, enable_wal
from .errors import NewerSchemaError, NotADatabaseError, TuningDBError
from .models import SCHEMA_VERSION, SCHEMA_VERSION_KEY, SOURCE_HASH_LENGTH, TABLE_NAMES, Base, MetaRow
from .paths import sqlite_file

_NOT_A_DATABASE_MARKERS = ("file is not a database", "file is encrypted")

# Every SQLite file starts with these bytes. SQLite treats a file shorter than one page as an
# empty database and overwrites it, so that check cannot be left to SQLite.
_SQLITE_MAGIC = b"SQLite format 3\x00"


def open_schema(handle: EngineHandle, location: str) -> int:
    """Validate (or create) the schema and return its version; raise a one-line error otherwise."""
    _refuse_foreign_file(handle.url, location)
    try:
        with handle.reader().connect() as conn:
            version = _stored_version(conn, location)
        if version is None:
            version = _create(handle.writer(), location)
        _check_supported(version, location)
        if version < SCHEMA_VERSION:
            version = _upgrade(handle.writer(), location)
        enable_wal(handle.writer())
    except (DBAPIError, sqlite3.DatabaseError) as exc:
        raise _open_error(exc, location) from None
    return version


def _refuse_foreign_file(url: str, location: str) -> None:
    path = sqlite_file(url)
    if path is None:
        return
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError:
        return  # a new file, or a failure SQLite will report in its own words
    if head and head != _SQLITE_MAGIC:
        raise _not_sqlite(location)


def _not_sqlite(location: str) -> NotADatabaseError:
    return NotADatabaseError(
        f"{location}: not an SQLite database; move it aside or point --db/KFACTORY_DB elsewhere"
    )


def _check_supported(version: int, location: str) -> None:
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"{location}: tuning database schema version {version} is newer than this "
            f"kernel-factory supports ({SCHEMA_VERSION}); upgrade kernel-factory or point "
            f"--db/KFACTORY_DB at another database"
        )
    if version < 1:
        raise NotADatabaseError(
            f"{location}: invalid tuning database schema version {version}; "
            f"point --db/KFACTORY_DB at another database"
        )


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
    """The stored schema version, or None for a database with nothing of ours in it yet.

    A database holding other tables is refused rather than written into: creating our tables
    inside another application's SQLite file would silently damage it.
    """
    tables = set(inspect(conn).get_table_names())
    version = _read_version(conn, location) if "meta" in tables else None
    if version is not None:
        return version
    ours, foreign = tables & TABLE_NAMES, tables - TABLE_NAMES
    if foreign and conn.dialect.name == "sqlite":
        raise NotADatabaseError(
            f"{location}: an SQLite database, but not a kernel-factory tuning database; "
            f"point --db/KFACTORY_DB at another file"
        )
    if (ours and "meta" not in ours) or _holds_rows(conn, ours - {"meta"}):
        # Stamping the current version on data of unknown version could misread every row.
        raise NotADatabaseError(
            f"{location}: has tables named like a tuning database but no schema version; "
            f"point --db/KFACTORY_DB at another database"
        )
    # Empty, or empty tables left by a creation that did not finish (DDL outside the transaction).
    return None


def _holds_rows(conn: Connection, tables: set[str]) -> bool:
    return any(conn.execute(text(f'SELECT 1 FROM "{name}" LIMIT 1')).first() is not None for name in sorted(tables))


def _read_version(conn: Connection, location: str) -> int | None:
    try:
        stored = conn.execute(select(MetaRow.value).where(MetaRow.key == SCHEMA_VERSION_KEY)).scalar()
    except DBAPIError:
        raise NotADatabaseError(
            f"{location}: its meta table is not a tuning database's; point --db/KFACTORY_DB at another database"
        ) from None
    if stored is None:
        return None
    try:
        return int(stored)
    except ValueError:
        raise NotADatabaseError(
            f"{location}: unreadable schema version {stored!r}; point --db/KFACTORY_DB at another database"
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


def _add_source_hash(conn: Connection) -> None:
    """1 -> 2: measurements carry the source hash of the code they timed; older rows keep NULL
    (unknown code), so they are not served and a resumed tune measures them again."""
    conn.execute(text(f"ALTER TABLE measurements ADD COLUMN source_hash VARCHAR({SOURCE_HASH_LENGTH})"))


# Step from version N to N + 1, run inside the upgrade's write transaction.
_UPGRADES: dict[int, Callable[[Connection], None]] = {1: _add_source_hash}


def _upgrade(engine: Engine, location: str) -> int:
    """Bring an older schema to SCHEMA_VERSION in place, in one write transaction.

    The version is read again under the write lock, so processes opening an old file together
    upgrade it once; a failed step rolls the whole upgrade back.
    """
    with engine.begin() as conn:
        version = _stored_version(conn, location)
        assert version is not None, "only a versioned database is upgraded"
        _check_supported(version, location)
        if version == SCHEMA_VERSION:
            return version  # another process upgraded it while this one waited for the lock
        while version < SCHEMA_VERSION:
            _UPGRADES[version](conn)
            version += 1
        conn.execute(update(MetaRow).where(MetaRow.key == SCHEMA_VERSION_KEY).values(value=str(version)))
    return version


def _open_error(exc: Exception, location: str) -> TuningDBError:
    detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    if any(marker in detail for marker in _NOT_A_DATABASE_MARKERS):
        return _not_sqlite(location)
    return TuningDBError(f"{location}: cannot open tuning database: {detail}")
