"""A device's latest run of messages the gateway dead-lettered for its rate (``fw.kind``
``rate_limited`` on ``telemetry.deadletter``).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "device_rate_limits",
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.Column("since_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_ms", sa.BigInteger(), nullable=False),
        sa.Column("dead_letters", sa.BigInteger(), nullable=False),
        sa.Column("source_partition", sa.Integer(), nullable=False),
        sa.Column("source_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("device_id"),
    )


def downgrade() -> None:
    op.drop_table("device_rate_limits")
