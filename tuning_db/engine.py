"""Engine construction: SQLite tuned for several processes writing one file, server connect limits, fork safety."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.pool import ConnectionPoolEntry

BUSY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10  # a database server that does not answer by then is reported as unreachable

# Execution option read by the SQLite "begin" hook; writers ask for IMMEDIATE so a
# read-compare-write holds the write lock from its first read.
BEGIN_MODE_OPTION = "kfactory_sqlite_begin"
BEGIN_DEFERRED = "DEFERRED"
BEGIN_IMMEDIATE = "IMMEDIATE"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def create_db_engine(url: str) -> Engine:
    """An engine for `url`; SQLite connections get a busy timeout, foreign keys and explicit BEGIN."""
    if not is_sqlite(url):
        parsed = make_url(url)
        # An unreachable server is a one-line error after a while, not a hang.
        connect_args = {"connect_timeout": CONNECT_TIMEOUT_S} if parsed.get_backend_name() == "postgresql" else {}
        return create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def writer(engine: Engine) -> Engine:
    """A view of `engine` whose transactions take SQLite's write lock up front."""
    return engine.execution_options(**{BEGIN_MODE_OPTION: BEGIN_IMMEDIATE})


def enable_wal(engine: Engine) -> str | None:
    """Put an SQLite file in WAL mode so readers never wait for the writer; returns the mode.

    WAL is a property of the file, so this runs once per open, after the file is known to be
    a tuning database: switching another application's database would change that file.
    Switching needs an exclusive lock and SQLite does not wait for it through the busy
    timeout, so processes opening a fresh file together retry here until one has switched it.
    """
    if engine.dialect.name != "sqlite":
        return None
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            with engine.connect() as conn:
                # Straight to the driver: SQLite refuses to change the journal mode inside a transaction.
                row = conn.connection.dbapi_connection.execute("PRAGMA journal_mode = WAL").fetchone()
            return None if row is None else str(row[0])
        except sqlite3.OperationalError as exc:
            if _is_read_only(exc):
                return None  # opened read-only: nothing of the file may change, its mode included
            if not _is_busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _is_read_only(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) == sqlite3.SQLITE_READONLY


def _sqlite_on_connect(dbapi_connection: Any, connection_record: ConnectionPoolEntry) -> None:
    # sqlite3 would otherwise BEGIN lazily before the first write only; the begin hook owns BEGIN.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get(BEGIN_MODE_OPTION, BEGIN_DEFERRED)
    conn.exec_driver_sql(f"BEGIN {mode}")


class EngineHandle:
    """Creates the engine on first use and again after a fork, so no connection crosses processes."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._engine: Engine | None = None
        self._writer: Engine | None = None
        self._pid = -1

    def reader(self) -> Engine:
        return self._current()[0]

    def writer(self) -> Engine:
        return self._current()[1]

    def _current(self) -> tuple[Engine, Engine]:
        with self._lock:
            if self._engine is None or self._pid != os.getpid():
                if self._engine is not None:
                    # Inherited from the parent: drop the pool without closing its sockets/files.
                    self._engine.dispose(close=False)
                self._engine = create_db_engine(self.url)
                self._writer = writer(self._engine)
                self._pid = os.getpid()
            assert self._writer is not None
            return self._engine, self._writer

    def dispose(self) -> None:
        """Close pooled connections owned by this process."""
        with self._lock:
            if self._engine is not None:
                self._engine.dispose(close=self._pid == os.getpid())
            self._engine = None
            self._writer = None
            self._pid = -1
