"""Where the tuning database lives when the caller does not say, and checking where it says."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote, unquote

import platformdirs
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from .errors import DatabaseURLError

APP_NAME = "kernel-factory"
DEFAULT_DB_ENV = "KFACTORY_DB"
DB_FILENAME = "tuning.db"

# "dialect://" or "dialect+driver://": anything else is taken as a file path.
_URL_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9+._-]*://")

# The pip package that provides a DB-API module SQLAlchemy imports, where the names differ.
_DRIVER_PACKAGES = {
    "psycopg2": "psycopg2-binary",
    "psycopg": "psycopg[binary]",
    "pymysql": "PyMySQL",
    "MySQLdb": "mysqlclient",
    "cx_Oracle": "cx_Oracle",
    "oracledb": "oracledb",
    "pyodbc": "pyodbc",
    "asyncpg": "asyncpg",
}


def default_db_url() -> str:
    """$KFACTORY_DB when set, else a file in the per-user data directory (created on demand)."""
    configured = os.environ.get(DEFAULT_DB_ENV, "").strip()
    if configured:
        return as_db_url(configured)
    directory = Path(platformdirs.user_data_dir(APP_NAME))
    _make_directory(directory)
    return sqlite_url(directory / DB_FILENAME)


def as_db_url(value: str) -> str:
    """Accept either an SQLAlchemy URL or a plain file path, so users can type whichever is natural.

    A URL is checked here, once, so a typo or a missing driver is one line naming it rather than an
    import error deep inside SQLAlchemy.
    """
    if _URL_PATTERN.match(value):
        check_url(value)
        return value
    try:
        path = Path(value).expanduser().absolute()
    except (RuntimeError, ValueError) as exc:  # "~nobody/x", an embedded NUL
        raise DatabaseURLError(f"{value!r}: not a usable database path ({exc})") from None
    _make_directory(path.parent)
    if path.is_dir():
        raise DatabaseURLError(f"{path}: is a directory; --db/KFACTORY_DB must name a file or a URL")
    return sqlite_url(path)


def read_only_url(url: str) -> str:
    """The URL of the same SQLite file opened read-only, when it exists; other URLs unchanged.

    Read-only commands (query, stats, export) open it so, and then work on a file they may not write.
    """
    path = sqlite_file(url)
    if path is None or not path.is_file():
        return url
    return f"sqlite:///file:{quote(str(path))}?mode=ro&uri=true"


def is_read_only(url: str) -> bool:
    """Whether `url` opens an SQLite file read-only (as `read_only_url` makes it)."""
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.query.get("mode") == "ro"


def check_url(url: str) -> None:
    """Raise DatabaseURLError unless SQLAlchemy knows the URL's scheme and its driver is installed."""
    scheme = url.split("://", 1)[0]
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise DatabaseURLError(f"{scheme}://...: not a valid database URL") from None
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        raise DatabaseURLError(
            f"{scheme}://: unknown database scheme; use a file path, sqlite:///FILE or postgresql://HOST/DB"
        ) from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        module = (exc.name or "").split(".")[0] or parsed.get_driver_name()
        package = _DRIVER_PACKAGES.get(module, module)
        raise DatabaseURLError(
            f"{scheme}:// needs the Python driver {module!r}, which is not installed: pip install {package}"
        ) from None


def sqlite_url(path: Path) -> str:
    """SQLAlchemy URL of an SQLite file."""
    return f"sqlite:///{path}"


def sqlite_file(url: str) -> Path | None:
    """The file behind an SQLite URL (also a `file:` URI); None for other backends and in-memory ones."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if database.startswith("file:"):
        database = unquote(database[len("file:"):].split("?", 1)[0])
        if parsed.query.get("mode") == "memory":
            return None
    if database in ("", ":memory:"):
        return None
    return Path(database)


def describe_location(url: str) -> str:
    """Name the database in messages: the file path for SQLite, else the URL without its password."""
    path = sqlite_file(url)
    if path is not None:
        return str(path)
    return make_url(url).render_as_string(hide_password=True)


def _make_directory(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseURLError(
            f"{directory}: cannot create the tuning database's directory: {exc.strerror or exc}"
        ) from None
