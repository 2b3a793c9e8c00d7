"""The initial schema: devices (registry, state, sessions, readings, models), alert episodes
and their events, commands, API keys, webhooks and their deliveries.

A database made before migrations existed has a single ``alerts`` table of per-reading alerts;
it is dropped here — everything in it is materialised again from Kafka.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("alerts"):
        op.drop_table("alerts")
    op.create_table(
        "alert_events",
        sa.Column("event_id", sa.String(length=80), nullable=False),
        sa.Column("alert_id", sa.String(length=64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("event_ms", sa.BigInteger(), nullable=False),
        sa.Column("detected_ms", sa.BigInteger(), nullable=False),
        sa.Column("stored_ms", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("reason", sa.String(length=512), nullable=False),
        sa.PrimaryKeyConstraint("event_id"),
    )
    with op.batch_alter_table("alert_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alert_events_alert_id"), ["alert_id"], unique=False)

    op.create_table(
        "alerts",
        sa.Column("alert_id", sa.String(length=64), nullable=False),
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("detector", sa.String(length=64), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("start_ms", sa.BigInteger(), nullable=False),
        sa.Column("end_ms", sa.BigInteger(), nullable=True),
        sa.Column("params_version", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("event_ms", sa.BigInteger(), nullable=False),
        sa.Column("received_ms", sa.BigInteger(), nullable=False),
        sa.Column("detected_ms", sa.BigInteger(), nullable=False),
        sa.Column("stored_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("expected", sa.Float(), nullable=False),
        sa.Column("band", sa.Float(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("reason", sa.String(length=512), nullable=False),
        sa.Column("acknowledged_by", sa.String(length=128), nullable=True),
        sa.Column("acknowledged_ms", sa.BigInteger(), nullable=True),
        sa.Column("ack_comment", sa.String(length=1024), nullable=True),
        sa.PrimaryKeyConstraint("alert_id"),
    )
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.create_index("ix_alerts_device_start", ["device_id", "start_ms"], unique=False)
        batch_op.create_index(batch_op.f("ix_alerts_severity"), ["severity"], unique=False)
        batch_op.create_index(batch_op.f("ix_alerts_start_ms"), ["start_ms"], unique=False)
        batch_op.create_index(batch_op.f("ix_alerts_state"), ["state"], unique=False)

    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("scopes", sa.String(length=64), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("revoked_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("key_id"),
    )
    op.create_table(
        "commands",
        sa.Column("command_id", sa.String(length=64), nullable=False),
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=128), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("alert_id", sa.String(length=64), nullable=True),
        sa.Column("issued_by", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.String(length=512), nullable=False),
        sa.Column("issued_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_ms", sa.BigInteger(), nullable=False),
        sa.Column("sent_ms", sa.BigInteger(), nullable=True),
        sa.Column("answered_ms", sa.BigInteger(), nullable=True),
        sa.Column("ack_status", sa.String(length=16), nullable=True),
        sa.Column("device_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("command_id"),
        sa.UniqueConstraint("device_id", "idempotency_key", name="uq_commands_idempotency"),
    )
    with op.batch_alter_table("commands", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_commands_alert_id"), ["alert_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_commands_device_id"), ["device_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_commands_status"), ["status"], unique=False)

    op.create_table(
        "device_models",
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("trained_from_ms", sa.BigInteger(), nullable=True),
        sa.Column("trained_to_ms", sa.BigInteger(), nullable=True),
        sa.Column("published_ms", sa.BigInteger(), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("device_id"),
    )
    op.create_table(
        "device_sessions",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.Column("start_ms", sa.BigInteger(), nullable=False),
        sa.Column("end_ms", sa.BigInteger(), nullable=False),
        sa.Column("readings", sa.BigInteger(), nullable=False),
        sa.Column("first_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("end_reason", sa.String(length=16), nullable=True),
        sa.PrimaryKeyConstraint("session_id"),
    )
    with op.batch_alter_table("device_sessions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_device_sessions_device_start", ["device_id", "start_ms"], unique=False
        )

    op.create_table(
        "device_state",
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("last_seen_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_received_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_values", sa.JSON(), nullable=False),
        sa.Column("open_alerts", sa.JSON(), nullable=False),
        sa.Column("params_version", sa.BigInteger(), nullable=False),
        sa.Column("clock_offset_ms", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("device_id"),
    )
    with op.batch_alter_table("device_state", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_device_state_status"), ["status"], unique=False)

    op.create_table(
        "devices",
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=True),
        sa.Column("name", sa.String(length=256), nullable=True),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.Column("registered", sa.Boolean(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("device_id"),
    )
    op.create_table(
        "readings",
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("device_event_ms", sa.BigInteger(), nullable=False),
        sa.Column("event_ms", sa.BigInteger(), nullable=False),
        sa.Column("received_ms", sa.BigInteger(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("device_id", "seq", "device_event_ms"),
    )
    with op.batch_alter_table("readings", schema=None) as batch_op:
        batch_op.create_index("ix_readings_device_event", ["device_id", "event_ms"], unique=False)

    op.create_table(
        "webhooks",
        sa.Column("webhook_id", sa.String(length=32), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("description", sa.String(length=512), nullable=False),
        sa.Column("devices", sa.JSON(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("severities", sa.JSON(), nullable=False),
        sa.Column("statuses", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("webhook_id"),
    )
    op.create_table(
        "device_tags",
        sa.Column("device_id", sa.String(length=128), nullable=False),
        sa.Column("tag", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.device_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("device_id", "tag"),
    )
    with op.batch_alter_table("device_tags", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_device_tags_tag"), ["tag"], unique=False)

    op.create_table(
        "webhook_deliveries",
        sa.Column("delivery_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("webhook_id", sa.String(length=32), nullable=False),
        sa.Column("message_id", sa.String(length=96), nullable=False),
        sa.Column("event_type", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("next_attempt_ms", sa.BigInteger(), nullable=False),
        sa.Column("delivered_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=512), nullable=True),
        sa.ForeignKeyConstraint(["webhook_id"], ["webhooks.webhook_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("delivery_id"),
        sa.UniqueConstraint("webhook_id", "message_id", name="uq_deliveries_message"),
    )
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.create_index("ix_deliveries_due", ["status", "next_attempt_ms"], unique=False)

    op.create_table(
        "webhook_attempts",
        sa.Column("attempt_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("delivery_id", sa.Integer(), nullable=False),
        sa.Column("webhook_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(length=512), nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["delivery_id"], ["webhook_deliveries.delivery_id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("attempt_id"),
    )
    with op.batch_alter_table("webhook_attempts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_webhook_attempts_delivery_id"), ["delivery_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_webhook_attempts_webhook_id"), ["webhook_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("webhook_attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhook_attempts_webhook_id"))
        batch_op.drop_index(batch_op.f("ix_webhook_attempts_delivery_id"))

    op.drop_table("webhook_attempts")
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_deliveries_due")

    op.drop_table("webhook_deliveries")
    with op.batch_alter_table("device_tags", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_device_tags_tag"))

    op.drop_table("device_tags")
    op.drop_table("webhooks")
    with op.batch_alter_table("readings", schema=None) as batch_op:
        batch_op.drop_index("ix_readings_device_event")

    op.drop_table("readings")
    op.drop_table("devices")
    with op.batch_alter_table("device_state", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_device_state_status"))

    op.drop_table("device_state")
    with op.batch_alter_table("device_sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_device_sessions_device_start")

    op.drop_table("device_sessions")
    op.drop_table("device_models")
    with op.batch_alter_table("commands", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_commands_status"))
        batch_op.drop_index(batch_op.f("ix_commands_device_id"))
        batch_op.drop_index(batch_op.f("ix_commands_alert_id"))

    op.drop_table("commands")
    op.drop_table("api_keys")
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_alerts_state"))
        batch_op.drop_index(batch_op.f("ix_alerts_start_ms"))
        batch_op.drop_index(batch_op.f("ix_alerts_severity"))
        batch_op.drop_index("ix_alerts_device_start")

    op.drop_table("alerts")
    with op.batch_alter_table("alert_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_alert_events_alert_id"))

    op.drop_table("alert_events")
