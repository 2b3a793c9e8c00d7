"""Operators' rules and every version of each (a deletion is a version); an alert episode's
``rule_id`` and ``rule_version`` when a rule raised it, and no expected value, band or (when the
rule went) value for such an episode.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rules",
        sa.Column("rule_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=True),
        sa.Column("devices", sa.JSON(), nullable=True),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("rule_id"),
    )
    with op.batch_alter_table("rules") as batch:
        batch.create_index(batch.f("ix_rules_deleted"), ["deleted"], unique=False)
    op.create_table(
        "rule_versions",
        sa.Column("rule_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=True),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("rule_id", "version"),
    )
    with op.batch_alter_table("alerts") as batch:
        batch.add_column(sa.Column("rule_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("rule_version", sa.BigInteger(), nullable=True))
        batch.create_index(batch.f("ix_alerts_rule_id"), ["rule_id"], unique=False)
        for column in ("value", "expected", "band"):
            batch.alter_column(column, existing_type=sa.Float(), nullable=True)
    with op.batch_alter_table("alert_events") as batch:
        batch.alter_column("value", existing_type=sa.Float(), nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("alert_events") as batch:
        batch.alter_column("value", existing_type=sa.Float(), nullable=False)
    with op.batch_alter_table("alerts") as batch:
        for column in ("value", "expected", "band"):
            batch.alter_column(column, existing_type=sa.Float(), nullable=False)
        batch.drop_index(batch.f("ix_alerts_rule_id"))
        batch.drop_column("rule_version")
        batch.drop_column("rule_id")
    op.drop_table("rule_versions")
    with op.batch_alter_table("rules") as batch:
        batch.drop_index(batch.f("ix_rules_deleted"))
    op.drop_table("rules")
