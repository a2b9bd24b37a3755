"""A cheap "has anything been committed since?" token, so readers may memoize lookups between writes.

SQLite's `PRAGMA data_version` changes on a connection whenever another connection (of any
process) commits to the file. The probe keeps one private read connection for it: this process's
own writes go through the engine's other connections, so they change the token too. A probe costs
a few microseconds, a real lookup hundreds. Other engines give no token (None): callers then read
every time.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
from typing import Hashable

from .paths import sqlite_file

# Numbers every probe connection of the process: tokens of two connections (of one probe, or of two
# TuningDB objects on one file) never compare equal, since their data_version counts are unrelated.
_connections = itertools.count(1)


class ChangeProbe:
    """Tokens that are equal only if nothing was committed to the database in between."""

    def __init__(self, url: str) -> None:
        path = sqlite_file(url)
        self._uri = None if path is None else path.absolute().as_uri() + "?mode=rw"
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._serial = 0

    def token(self) -> Hashable | None:
        """An opaque value; None when this database cannot tell (then nothing may be memoized)."""
        if self._uri is None:
            return None
        with self._lock:
            try:
                conn = self._connection()
                (version,) = conn.execute("PRAGMA data_version").fetchone()
            except sqlite3.Error:
                self._conn = None
                return None
            return (self._serial, version)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            # A connection inherited across fork is abandoned, never used or closed, in the child.
            assert self._uri is not None
            self._conn = sqlite3.connect(self._uri, uri=True, isolation_level=None, check_same_thread=False)
            self._pid = os.getpid()
            self._serial = next(_connections)
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
