"""Schema 2: measurements carry the source hash of the code they timed.

Revision ID: 0002
Revises: 0001
Create Date: 2025-11-25

Older rows keep NULL (unknown code): they are not served, and a resumed tune measures them again.
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: Union[str, Sequence[str], None] = "0001"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# Where the schema version is kept, readable by every kernel-factory (older ones refuse newer numbers).
_META = sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.String))


def upgrade() -> None:
    # A plain ADD COLUMN on both engines (no table copy on SQLite); placed last, as pre-Alembic
    # upgrades placed it, while a fresh schema-2 table had it after `instance`: column order is
    # not part of the schema.
    op.add_column("measurements", sa.Column("source_hash", sa.String(64), nullable=True))
    op.execute(_META.update().where(_META.c.key == "schema_version").values(value="2"))


def downgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("source_hash")
    op.execute(_META.update().where(_META.c.key == "schema_version").values(value="1"))
