"""Schema 1: devices, measurements and winners, and meta holding the schema version.

Revision ID: 0001
Revises:
Create Date: 2025-11-25

Databases written before Alembic carry only meta's schema_version: 1 and 2 are stamped as
revisions 0001 and 0002 before they are upgraded (tuning_db.schema).
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: Union[str, Sequence[str], None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# Where the schema version is kept, readable by every kernel-factory (older ones refuse newer numbers).
_META = sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.String))


def upgrade() -> None:
    op.create_table(
        "meta",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.String(256), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(16), nullable=False),
        sa.Column("arch", sa.String(64), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("sm_count", sa.Integer(), nullable=False),
        sa.Column("driver_version", sa.String(64), nullable=False),
        sa.Column("compiler_version", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "backend", "arch", "name", "sm_count", "driver_version", "compiler_version", name="uq_devices_identity"
        ),
    )
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("problem_key", sa.String(768), nullable=False),
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("instance", sa.String(256), nullable=False),
        sa.Column("median_us", sa.Float(), nullable=True),
        sa.Column("spread_us", sa.Float(), nullable=True),
        sa.Column("reps", sa.Integer(), nullable=False),
        sa.Column("verified", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("gbps", sa.Float(), nullable=True),
        sa.Column("tflops", sa.Float(), nullable=True),
        sa.Column("recorded_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_measurements_problem_device", "measurements", ["problem_key", "device_id"])
    op.create_table(
        "winners",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("problem_key", sa.String(768), nullable=False),
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("measurement_id", sa.Integer(), nullable=False),
        sa.Column("decided_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"]),
        sa.ForeignKeyConstraint(["measurement_id"], ["measurements.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("problem_key", "device_id", name="uq_winners_problem_device"),
    )
    op.bulk_insert(_META, [{"key": "schema_version", "value": "1"}])


def downgrade() -> None:
    op.drop_table("winners")
    op.drop_index("ix_measurements_problem_device", table_name="measurements")
    op.drop_table("measurements")
    op.drop_table("devices")
    op.drop_table("meta")
