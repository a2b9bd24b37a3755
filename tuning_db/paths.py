"""Where the tuning database lives when the caller does not say."""

from __future__ import annotations

import os
import re
from pathlib import Path

import platformdirs
from sqlalchemy.engine import make_url

APP_NAME = "kernel-factory"
DEFAULT_DB_ENV = "KFACTORY_DB"
DB_FILENAME = "tuning.db"

# "dialect://" or "dialect+driver://": anything else is taken as a file path.
_URL_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9+._-]*://")


def default_db_url() -> str:
    """$KFACTORY_DB when set, else a file in the per-user data directory (created on demand)."""
    configured = os.environ.get(DEFAULT_DB_ENV, "").strip()
    if configured:
        return as_db_url(configured)
    directory = Path(platformdirs.user_data_dir(APP_NAME))
    directory.mkdir(parents=True, exist_ok=True)
    return sqlite_url(directory / DB_FILENAME)


def as_db_url(value: str) -> str:
    """Accept either an SQLAlchemy URL or a plain file path, so users can type whichever is natural."""
    if _URL_PATTERN.match(value):
        return value
    path = Path(value).expanduser().absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    return sqlite_url(path)


def sqlite_url(path: Path) -> str:
    """SQLAlchemy URL of an SQLite file."""
    return f"sqlite:///{path}"


def sqlite_file(url: str) -> Path | None:
    """The file behind an SQLite URL; None for other backends and in-memory databases."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def describe_location(url: str) -> str:
    """Name the database in messages: the file path for SQLite, else the URL without its password."""
    path = sqlite_file(url)
    if path is not None:
        return str(path)
    return make_url(url).render_as_string(hide_password=True)
