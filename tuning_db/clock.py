"""The database server's clock in SQL, so leases held by workers on many machines are judged by one clock.

A lease written with one machine's clock and checked against another's would expire early or late by
their difference; `utc_now()` and `utc_after(seconds)` are evaluated by the database instead. Both give
naive UTC timestamps in the form UTCDateTime stores (SQLite: text with six fractional digits, so text
comparison orders them as times), and compare correctly with stored values on both engines.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, literal
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from .models import UTCDateTime

_SQLITE_NOW = "STRFTIME('%Y-%m-%d %H:%M:%f', 'now'{shift}) || '000'"
_POSTGRES_NOW = "(CLOCK_TIMESTAMP() AT TIME ZONE 'UTC')"


class utc_now(FunctionElement[datetime]):  # noqa: N801 - an SQL function, named like one
    """The server's current UTC time."""

    type = UTCDateTime()
    inherit_cache = True
    name = "kf_utc_now"


class utc_after(FunctionElement[datetime]):  # noqa: N801
    """The server's current UTC time plus `seconds` (>= 0), sent as a bound parameter."""

    type = UTCDateTime()
    inherit_cache = True
    name = "kf_utc_after"

    def __init__(self, seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError(f"utc_after needs seconds >= 0, got {seconds!r}")
        super().__init__(literal(float(seconds), Float()))


@compiles(utc_now, "sqlite")
def _sqlite_now(element: utc_now, compiler: Any, **kw: Any) -> str:
    return "(" + _SQLITE_NOW.format(shift="") + ")"


@compiles(utc_after, "sqlite")
def _sqlite_after(element: utc_after, compiler: Any, **kw: Any) -> str:
    (seconds,) = element.clauses
    shift = f", '+' || {compiler.process(seconds, **kw)} || ' seconds'"
    return "(" + _SQLITE_NOW.format(shift=shift) + ")"


@compiles(utc_now, "postgresql")
def _postgres_now(element: utc_now, compiler: Any, **kw: Any) -> str:
    return _POSTGRES_NOW


@compiles(utc_after, "postgresql")
def _postgres_after(element: utc_after, compiler: Any, **kw: Any) -> str:
    (seconds,) = element.clauses
    return f"({_POSTGRES_NOW} + MAKE_INTERVAL(secs => {compiler.process(seconds, **kw)}))"


@compiles(utc_now)
@compiles(utc_after)
def _unsupported(element: Any, compiler: Any, **kw: Any) -> str:
    raise CompileError(f"tuning jobs need SQLite or PostgreSQL, not {compiler.dialect.name}")
