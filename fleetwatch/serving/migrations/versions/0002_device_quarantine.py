"""A device's quarantine in its state: until when, and why (``device.state``'s
``quarantined_until_ms`` and ``quarantine_reason``).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("device_state") as batch:
        batch.add_column(sa.Column("quarantined_until_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("quarantine_reason", sa.String(length=512), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("device_state") as batch:
        batch.drop_column("quarantine_reason")
        batch.drop_column("quarantined_until_ms")
