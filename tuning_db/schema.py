"""Opening a database: recognise it, refuse foreign or newer ones, create a fresh one, upgrade an older one.

Schema changes are Alembic revisions (tuning_db/migrations/versions/), revision "000N" being schema
version N; meta's schema_version row mirrors the revision, so a kernel-factory of any age reads the
version from one place and refuses a newer database. Databases written before Alembic carry only
the meta row (versions 1 and 2): they are stamped with the matching revision, then upgraded.

Opening an up-to-date database reads two rows and imports nothing of Alembic (select() opens the
default database once per process and must stay fast). A fresh database is created from the models
and stamped at the head revision; tests/test_migrations.py checks that the revisions build the same
tables. Creating and upgrading hold the schema lock (SQLite's write lock, a PostgreSQL advisory lock)
and re-read the version under it, so processes opening one database together change it once.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Connection, Engine, MetaData, PrimaryKeyConstraint, String, Table, inspect, select, text
from sqlalchemy.exc import DBAPIError

from .engine import EngineHandle, enable_wal
from .errors import NewerSchemaError, NotADatabaseError, TuningDBError
from .models import SCHEMA_VERSION, SCHEMA_VERSION_KEY, TABLE_NAMES, Base, MetaRow
from .paths import is_read_only, sqlite_file

_NOT_A_DATABASE_MARKERS = ("file is not a database", "file is encrypted")

# Every SQLite file starts with these bytes. SQLite treats a file shorter than one page as an
# empty database and overwrites it, so that check cannot be left to SQLite.
_SQLITE_MAGIC = b"SQLite format 3\x00"

MIGRATIONS_DIR = Path(__file__).with_name("migrations")

# The newest schema written before Alembic: such a database has no alembic_version table.
LAST_PRE_ALEMBIC_VERSION = 2

# The oldest schema this code can read without upgrading it: a read-only open (`query`, `db stats`,
# `db export`) of such a database works; anything older must be upgraded first.
READABLE_FROM_VERSION = 2

# Alembic's own bookkeeping table, as Alembic creates it; a fresh database is stamped through it.
VERSION_TABLE = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)
KNOWN_TABLES = TABLE_NAMES | {VERSION_TABLE.name}

# pg_advisory_xact_lock key of schema changes ("kf_schem" in ASCII).
_POSTGRES_SCHEMA_LOCK = 0x6B665F736368656D


def revision_of(version: int) -> str:
    """The Alembic revision of schema `version`."""
    return f"{version:04d}"


HEAD_REVISION = revision_of(SCHEMA_VERSION)
_KNOWN_REVISIONS = {revision_of(v): v for v in range(1, SCHEMA_VERSION + 1)}


@dataclass(frozen=True)
class SchemaState:
    """What a database says about its own schema."""

    version: int  # meta's schema_version
    revision: str | None  # Alembic's revision; None for a database written before Alembic

    @property
    def current(self) -> bool:
        return self.version == SCHEMA_VERSION and self.revision == HEAD_REVISION


@dataclass(frozen=True)
class Opened:
    """The schema a database was found at and is at now."""

    version: int  # now
    found: int | None  # when opened; None: the database was created by this open

    @property
    def upgraded(self) -> bool:
        return self.found is not None and self.found != self.version


def open_schema(handle: EngineHandle, location: str) -> Opened:
    """Validate (or create, or upgrade) the schema; raise a one-line error otherwise.

    A database opened read-only is not upgraded: it is read at its own version when that is at least
    READABLE_FROM_VERSION, else refused with a line saying how to upgrade it.
    """
    _refuse_foreign_file(handle.url, location)
    try:
        with handle.reader().connect() as conn:
            state = _stored_state(conn, location)
        found = None if state is None else state.version
        if state is None:
            state, created = _create(handle.writer(), location)
            found = None if created else state.version  # another process created it meanwhile
        _check_supported(state, location)
        if not state.current:
            if is_read_only(handle.url):
                if state.version < READABLE_FROM_VERSION:
                    raise TuningDBError(
                        f"{location}: schema version {state.version} must be upgraded before it can be read; "
                        f"run `kfactory db upgrade --db {location}` (this command opens the database read-only)"
                    )
            else:
                state = _upgrade(handle.writer(), location)
        enable_wal(handle.writer())
    except (DBAPIError, sqlite3.DatabaseError) as exc:
        raise _open_error(exc, location) from None
    return Opened(state.version, found)


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


def _check_supported(state: SchemaState, location: str) -> None:
    version, revision = state.version, state.revision
    if version > SCHEMA_VERSION or (revision is not None and revision not in _KNOWN_REVISIONS):
        shown = f"schema version {version}" + (f" (migration revision {revision})" if revision is not None else "")
        raise NewerSchemaError(
            f"{location}: tuning database {shown} is newer than this "
            f"kernel-factory supports ({SCHEMA_VERSION}); upgrade kernel-factory or point "
            f"--db/KFACTORY_DB at another database"
        )
    if version < 1:
        raise NotADatabaseError(
            f"{location}: invalid tuning database schema version {version}; "
            f"point --db/KFACTORY_DB at another database"
        )
    if revision is None and version > LAST_PRE_ALEMBIC_VERSION:
        raise NotADatabaseError(
            f"{location}: schema version {version} without a migration revision (alembic_version); "
            f"point --db/KFACTORY_DB at another database"
        )
    if revision is not None and _KNOWN_REVISIONS[revision] != version:
        raise NotADatabaseError(
            f"{location}: schema version {version} disagrees with its migration revision {revision}; "
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


def _stored_state(conn: Connection, location: str) -> SchemaState | None:
    """The stored schema state, or None for a database with nothing of ours in it yet.

    A database holding other tables is refused rather than written into: creating our tables
    inside another application's SQLite file would silently damage it.
    """
    tables = set(inspect(conn).get_table_names())
    version = _read_version(conn, location) if "meta" in tables else None
    if version is not None:
        revision = _read_revision(conn, location) if VERSION_TABLE.name in tables else None
        return SchemaState(version, revision)
    ours, foreign = tables & KNOWN_TABLES, tables - KNOWN_TABLES
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


def _read_revision(conn: Connection, location: str) -> str | None:
    try:
        revisions = [str(r) for r in conn.execute(select(VERSION_TABLE.c.version_num)).scalars()]
    except DBAPIError:
        raise NotADatabaseError(
            f"{location}: its alembic_version table is not a tuning database's; point --db/KFACTORY_DB at another database"
        ) from None
    if len(revisions) > 1:
        raise NotADatabaseError(
            f"{location}: several migration revisions ({', '.join(sorted(revisions))}); "
            f"point --db/KFACTORY_DB at another database"
        )
    return revisions[0] if revisions else None


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


def _schema_lock(conn: Connection) -> None:
    """Serialize schema changes: SQLite's write transaction (BEGIN IMMEDIATE) already does."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _POSTGRES_SCHEMA_LOCK})


def _create(engine: Engine, location: str) -> tuple[SchemaState, bool]:
    """Create the tables and stamp them at the head revision, in one transaction under the schema lock;
    the state and whether this call created them.

    Re-checked inside, so processes opening a fresh database together agree on one creation.
    """
    with engine.begin() as conn:
        _schema_lock(conn)
        state = _stored_state(conn, location)
        if state is not None:
            return state, False
        Base.metadata.create_all(conn)
        conn.execute(MetaRow.__table__.insert().values(key=SCHEMA_VERSION_KEY, value=str(SCHEMA_VERSION)))
        VERSION_TABLE.create(conn, checkfirst=True)
        conn.execute(VERSION_TABLE.delete())
        conn.execute(VERSION_TABLE.insert().values(version_num=HEAD_REVISION))
    return SchemaState(SCHEMA_VERSION, HEAD_REVISION), True


def _upgrade(engine: Engine, location: str) -> SchemaState:
    """Bring an older schema to the head revision in place, in one transaction under the schema lock.

    The state is read again under the lock, so processes opening an old database together upgrade it
    once; a failed revision rolls the whole upgrade back, the version stamp included.
    """
    with engine.begin() as conn:
        _schema_lock(conn)
        state = _stored_state(conn, location)
        assert state is not None, "only a versioned database is upgraded"
        _check_supported(state, location)
        if state.current:
            return state  # another process upgraded it while this one waited for the lock
        run_migrations(conn, state)
        state = _stored_state(conn, location)
        assert state is not None and state.current, f"migrations left {state}"
    return state


def run_migrations(conn: Connection, state: SchemaState, target: str = HEAD_REVISION) -> None:
    """Alembic from `state` to `target` on `conn`, inside the caller's transaction."""
    from alembic import command

    config = alembic_config(conn)
    if state.revision is None:
        command.stamp(config, revision_of(state.version))
    command.upgrade(config, target)


def alembic_config(conn: Connection | None = None) -> Any:
    """An Alembic Config of the shipped migrations; env.py migrates on `conn` when given."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if conn is not None:
        config.attributes["connection"] = conn
    return config


def _open_error(exc: Exception, location: str) -> TuningDBError:
    detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    if any(marker in detail for marker in _NOT_A_DATABASE_MARKERS):
        return _not_sqlite(location)
    return TuningDBError(f"{location}: cannot open tuning database: {detail}")
