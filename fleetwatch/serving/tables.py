"""The API store's tables. The schema itself is made by the migrations in ``migrations/``;
these mappings must match them (``tests/unit/test_api_store.py`` checks that they do)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class DeviceRow(Base):
    """A device the API knows: registered by an operator, or discovered from its records."""

    __tablename__ = "devices"

    device_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    kind: Mapped[str | None] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(256))
    attributes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    registered: Mapped[bool] = mapped_column(Boolean, default=False)
    created_ms: Mapped[int] = mapped_column(BigInteger)
    updated_ms: Mapped[int] = mapped_column(BigInteger)


class DeviceTagRow(Base):
    __tablename__ = "device_tags"

    device_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("devices.device_id", ondelete="CASCADE"), primary_key=True
    )
    tag: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


class DeviceStateRow(Base):
    """The latest ``device.state`` record of a device."""

    __tablename__ = "device_state"

    device_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    last_seen_ms: Mapped[int] = mapped_column(BigInteger)
    last_received_ms: Mapped[int] = mapped_column(BigInteger)
    last_seq: Mapped[int] = mapped_column(BigInteger)
    last_values: Mapped[dict[str, float]] = mapped_column(JSON)
    open_alerts: Mapped[list[str]] = mapped_column(JSON)
    params_version: Mapped[int] = mapped_column(BigInteger)
    clock_offset_ms: Mapped[int] = mapped_column(BigInteger)
    session_id: Mapped[str | None] = mapped_column(String(64))
    quarantined_until_ms: Mapped[int | None] = mapped_column(BigInteger)
    quarantine_reason: Mapped[str | None] = mapped_column(String(512))
    updated_ms: Mapped[int] = mapped_column(BigInteger)


class SessionRow(Base):
    __tablename__ = "device_sessions"
    __table_args__ = (Index("ix_device_sessions_device_start", "device_id", "start_ms"),)

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    device_id: Mapped[str] = mapped_column(String(128))
    start_ms: Mapped[int] = mapped_column(BigInteger)
    end_ms: Mapped[int] = mapped_column(BigInteger)
    readings: Mapped[int] = mapped_column(BigInteger)
    first_seq: Mapped[int] = mapped_column(BigInteger)
    last_seq: Mapped[int] = mapped_column(BigInteger)
    end_reason: Mapped[str | None] = mapped_column(String(16))


class ReadingRow(Base):
    """A recent reading from ``telemetry.raw`` (a bounded number per device)."""

    __tablename__ = "readings"
    __table_args__ = (Index("ix_readings_device_event", "device_id", "event_ms"),)

    device_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    device_event_ms: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    event_ms: Mapped[int] = mapped_column(BigInteger)
    received_ms: Mapped[int] = mapped_column(BigInteger)
    metrics: Mapped[dict[str, float]] = mapped_column(JSON)


class RateLimitRow(Base):
    """A device's latest run of messages the gateway dead-lettered for its rate: dead letters
    less than ``RATE_LIMITED_RUN_S`` apart (:mod:`fleetwatch.contracts.deadletter`)."""

    __tablename__ = "device_rate_limits"

    device_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    since_ms: Mapped[int] = mapped_column(BigInteger)
    """The gateway's time of the run's first dead letter (wall clock)."""
    last_ms: Mapped[int] = mapped_column(BigInteger)
    dead_letters: Mapped[int] = mapped_column(BigInteger)
    source_partition: Mapped[int] = mapped_column(Integer)
    source_offset: Mapped[int] = mapped_column(BigInteger)
    """The place of the newest dead letter counted: one read again is not counted twice."""


class ModelRow(Base):
    """The latest ``model.params`` record of a device."""

    __tablename__ = "device_models"

    device_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(BigInteger)
    trained_from_ms: Mapped[int | None] = mapped_column(BigInteger)
    trained_to_ms: Mapped[int | None] = mapped_column(BigInteger)
    published_ms: Mapped[int | None] = mapped_column(BigInteger)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)


class AlertRow(Base):
    """One alert episode, folded from its events: the latest revision wins."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_device_start", "device_id", "start_ms"),)

    alert_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    device_id: Mapped[str] = mapped_column(String(128))
    metric: Mapped[str] = mapped_column(String(64))
    detector: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16), index=True)
    status: Mapped[str] = mapped_column(String(16))
    """The latest event's status: open, update, resolve, withdraw."""
    state: Mapped[str] = mapped_column(String(16), index=True)
    """open (open or update), resolved, withdrawn."""
    revision: Mapped[int] = mapped_column(Integer)
    start_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    end_ms: Mapped[int | None] = mapped_column(BigInteger)
    params_version: Mapped[int] = mapped_column(BigInteger)
    seq: Mapped[int] = mapped_column(BigInteger)
    event_ms: Mapped[int] = mapped_column(BigInteger)
    received_ms: Mapped[int] = mapped_column(BigInteger)
    detected_ms: Mapped[int] = mapped_column(BigInteger)
    stored_ms: Mapped[int] = mapped_column(BigInteger)
    """When the API first stored the episode."""
    updated_ms: Mapped[int] = mapped_column(BigInteger)
    value: Mapped[float | None] = mapped_column(Float)
    """None for a rule's episode resolved because the rule went (no reading judged it)."""
    expected: Mapped[float | None] = mapped_column(Float)
    """None for a rule's episode: a rule has a condition, not an expected value."""
    band: Mapped[float | None] = mapped_column(Float)
    score: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(String(512))
    rule_id: Mapped[str | None] = mapped_column(String(64), index=True)
    """The operator's rule that raised the episode (``detector`` ``rule``)."""
    rule_version: Mapped[int | None] = mapped_column(BigInteger)
    """The version of that rule the latest event was judged by."""
    acknowledged_by: Mapped[str | None] = mapped_column(String(128))
    acknowledged_ms: Mapped[int | None] = mapped_column(BigInteger)
    ack_comment: Mapped[str | None] = mapped_column(String(1024))


class AlertEventRow(Base):
    """Every event of every episode, as it came (history)."""

    __tablename__ = "alert_events"

    event_id: Mapped[str] = mapped_column(String(80), primary_key=True)
    alert_id: Mapped[str] = mapped_column(String(64), index=True)
    revision: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    severity: Mapped[str] = mapped_column(String(16))
    seq: Mapped[int] = mapped_column(BigInteger)
    event_ms: Mapped[int] = mapped_column(BigInteger)
    detected_ms: Mapped[int] = mapped_column(BigInteger)
    stored_ms: Mapped[int] = mapped_column(BigInteger)
    value: Mapped[float | None] = mapped_column(Float)
    score: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(String(512))


class CommandRow(Base):
    __tablename__ = "commands"
    __table_args__ = (
        UniqueConstraint("device_id", "idempotency_key", name="uq_commands_idempotency"),
    )

    command_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    device_id: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str] = mapped_column(String(64))
    args: Mapped[dict[str, Any]] = mapped_column(JSON)
    idempotency_key: Mapped[str] = mapped_column(String(128))
    request_hash: Mapped[str] = mapped_column(String(64))
    alert_id: Mapped[str | None] = mapped_column(String(64), index=True)
    issued_by: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), index=True)
    """pending → sent → acked | failed | timed_out."""
    detail: Mapped[str] = mapped_column(String(512), default="")
    issued_ms: Mapped[int] = mapped_column(BigInteger)
    expires_ms: Mapped[int] = mapped_column(BigInteger)
    sent_ms: Mapped[int | None] = mapped_column(BigInteger)
    answered_ms: Mapped[int | None] = mapped_column(BigInteger)
    ack_status: Mapped[str | None] = mapped_column(String(16))
    device_ms: Mapped[int | None] = mapped_column(BigInteger)


class ApiKeyRow(Base):
    __tablename__ = "api_keys"

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    scopes: Mapped[str] = mapped_column(String(64))
    """Space-separated."""
    secret_hash: Mapped[str] = mapped_column(String(64))
    created_ms: Mapped[int] = mapped_column(BigInteger)
    revoked_ms: Mapped[int | None] = mapped_column(BigInteger)


class WebhookRow(Base):
    __tablename__ = "webhooks"

    webhook_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    url: Mapped[str] = mapped_column(String(2048))
    secret: Mapped[str] = mapped_column(String(128))
    description: Mapped[str] = mapped_column(String(512), default="")
    devices: Mapped[list[str]] = mapped_column(JSON)
    tags: Mapped[list[str]] = mapped_column(JSON)
    severities: Mapped[list[str]] = mapped_column(JSON)
    statuses: Mapped[list[str]] = mapped_column(JSON)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_ms: Mapped[int] = mapped_column(BigInteger)
    updated_ms: Mapped[int] = mapped_column(BigInteger)


class DeliveryRow(Base):
    """One event owed to one subscriber (the outbox): pending → delivered | dead."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "message_id", name="uq_deliveries_message"),
        Index("ix_deliveries_due", "status", "next_attempt_ms"),
    )

    delivery_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    webhook_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("webhooks.webhook_id", ondelete="CASCADE")
    )
    message_id: Mapped[str] = mapped_column(String(96))
    """The ``webhook-id`` header: the alert event id, the same on every retry."""
    event_type: Mapped[str] = mapped_column(String(32))
    payload: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_ms: Mapped[int] = mapped_column(BigInteger)
    next_attempt_ms: Mapped[int] = mapped_column(BigInteger)
    delivered_ms: Mapped[int | None] = mapped_column(BigInteger)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(String(512))


class AttemptRow(Base):
    """The delivery log: one row per HTTP attempt."""

    __tablename__ = "webhook_attempts"

    attempt_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("webhook_deliveries.delivery_id", ondelete="CASCADE"), index=True
    )
    webhook_id: Mapped[str] = mapped_column(String(32), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    at_ms: Mapped[int] = mapped_column(BigInteger)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(String(512))
    duration_ms: Mapped[float] = mapped_column(Float)


class RuleRow(Base):
    """An operator's rule as it stands: its newest version (a deletion is one too)."""

    __tablename__ = "rules"

    rule_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    spec: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """The rule as written (:class:`fleetwatch.contracts.rules.RuleSpec`); ``None`` once
    deleted."""
    devices: Mapped[list[str] | None] = mapped_column(JSON)
    """The selection last published on the ``rules`` topic (``None``: every device)."""
    created_ms: Mapped[int] = mapped_column(BigInteger)
    updated_ms: Mapped[int] = mapped_column(BigInteger)
    """When the newest version was made."""
    updated_by: Mapped[str] = mapped_column(String(128))


class RuleVersionRow(Base):
    """Every version of every rule, as it was made."""

    __tablename__ = "rule_versions"

    rule_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    spec: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """``None``: this version deleted the rule."""
    updated_ms: Mapped[int] = mapped_column(BigInteger)
    updated_by: Mapped[str] = mapped_column(String(128))
