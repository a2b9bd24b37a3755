"""Alembic's environment: migrate on the connection tuning_db.schema hands over, in its transaction.

The caller (tuning_db.schema.upgrade) has already begun a transaction that holds the schema lock
(SQLite's write lock, a PostgreSQL advisory lock), so every revision and the version stamp commit
together or not at all. For a hand-run `alembic -x url=URL ...` (development only) an engine is made
from the URL instead.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from tuning_db.engine import create_db_engine
from tuning_db.models import Base


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite alters most things by copying the table: let revisions say so with batch_alter_table.
        render_as_batch=connection.dialect.name == "sqlite",
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("tuning_db migrations: pass -x url=DATABASE_URL (or use `kfactory db upgrade`)")
    engine = create_db_engine(url)
    try:
        with engine.begin() as conn:
            _migrate(conn)
    finally:
        engine.dispose()


_run()
