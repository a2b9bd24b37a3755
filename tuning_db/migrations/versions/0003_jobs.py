"""Schema 3: tuning jobs, claimed by fleet workers under a lease.

Revision ID: 0003
Revises: 0002
Create Date: 2025-11-25
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: Union[str, Sequence[str], None] = "0002"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# Where the schema version is kept, readable by every kernel-factory (older ones refuse newer numbers).
_META = sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.String))


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("problem_key", sa.String(768), nullable=False),
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("source_version", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(256), nullable=True),
        sa.Column("lease_token", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=True),
        sa.Column("enqueued_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("winner_instance", sa.String(256), nullable=True),
        sa.Column("winner_us", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("problem_key", "device_id", "source_version", name="uq_jobs_problem_device_source"),
    )
    op.create_index("ix_jobs_device_state", "jobs", ["device_id", "state", "id"])
    op.execute(_META.update().where(_META.c.key == "schema_version").values(value="3"))


def downgrade() -> None:
    op.drop_index("ix_jobs_device_state", table_name="jobs")
    op.drop_table("jobs")
    op.execute(_META.update().where(_META.c.key == "schema_version").values(value="2"))
