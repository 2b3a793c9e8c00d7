"""Webhook subscriptions, their delivery outbox and delivery log."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from fleetwatch.serving.store.pages import Paged, page
from fleetwatch.serving.store.upsert import insert_ignore
from fleetwatch.serving.tables import AttemptRow, DeliveryRow, DeviceTagRow, WebhookRow


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32).replace("-", "+").replace("_", "/") + "="


def create(session: Session, fields: dict[str, Any], now: int) -> WebhookRow:
    row = WebhookRow(
        webhook_id=f"wh_{secrets.token_hex(8)}",
        secret=fields.pop("secret", None) or new_secret(),
        created_ms=now,
        updated_ms=now,
        **fields,
    )
    session.add(row)
    return row


def list_hooks(session: Session) -> list[WebhookRow]:
    return list(session.scalars(select(WebhookRow).order_by(WebhookRow.created_ms)).all())


def enabled_hooks(session: Session) -> list[WebhookRow]:
    return list(session.scalars(select(WebhookRow).where(WebhookRow.enabled.is_(True))).all())


def tags_of(session: Session, device_ids: Sequence[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    if device_ids:
        rows = session.execute(
            select(DeviceTagRow.device_id, DeviceTagRow.tag).where(
                DeviceTagRow.device_id.in_(device_ids)
            )
        )
        for did, tag in rows:
            out.setdefault(did, set()).add(tag)
    return out


def enqueue(session: Session, deliveries: Sequence[dict[str, Any]]) -> None:
    """Owe these deliveries; one already owed (same webhook, same message id) stays as it is."""
    insert_ignore(session, DeliveryRow.__table__, deliveries)  # type: ignore[arg-type]


def delivery_row(
    webhook_id: str, message_id: str, event_type: str, body: str, now: int
) -> dict[str, Any]:
    return {
        "webhook_id": webhook_id,
        "message_id": message_id,
        "event_type": event_type,
        "payload": body,
        "status": "pending",
        "attempts": 0,
        "created_ms": now,
        "next_attempt_ms": now,
        "delivered_ms": None,
        "last_status_code": None,
        "last_error": None,
    }


def due(session: Session, now: int, exclude: set[int], limit: int) -> list[DeliveryRow]:
    query = (
        select(DeliveryRow)
        .where(DeliveryRow.status == "pending", DeliveryRow.next_attempt_ms <= now)
        .order_by(DeliveryRow.next_attempt_ms, DeliveryRow.delivery_id)
        .limit(limit + len(exclude))
    )
    return [d for d in session.scalars(query).all() if d.delivery_id not in exclude][:limit]


def record_attempt(
    session: Session,
    delivery: DeliveryRow,
    at_ms: int,
    status_code: int | None,
    error: str | None,
    duration_ms: float,
    outcome: str,
    next_attempt_ms: int,
) -> None:
    """Log one attempt and move the delivery on: ``delivered``, ``pending`` (retry at
    ``next_attempt_ms``) or ``dead``."""
    attempt = delivery.attempts + 1
    session.add(
        AttemptRow(
            delivery_id=delivery.delivery_id,
            webhook_id=delivery.webhook_id,
            attempt=attempt,
            at_ms=at_ms,
            status_code=status_code,
            error=error[:512] if error else None,
            duration_ms=duration_ms,
        )
    )
    session.execute(
        update(DeliveryRow)
        .where(DeliveryRow.delivery_id == delivery.delivery_id)
        .values(
            attempts=attempt,
            status=outcome,
            next_attempt_ms=next_attempt_ms,
            delivered_ms=at_ms if outcome == "delivered" else None,
            last_status_code=status_code,
            last_error=error[:512] if error else None,
        )
    )


def deliveries(
    session: Session, webhook_id: str, status: str | None, limit: int, offset: int
) -> Paged[DeliveryRow]:
    where = [DeliveryRow.webhook_id == webhook_id]
    if status is not None:
        where.append(DeliveryRow.status == status)
    return page(session, DeliveryRow, where, [DeliveryRow.delivery_id.desc()], limit, offset)


def attempts(session: Session, delivery_id: int) -> list[AttemptRow]:
    return list(
        session.scalars(
            select(AttemptRow)
            .where(AttemptRow.delivery_id == delivery_id)
            .order_by(AttemptRow.attempt)
        ).all()
    )


def redrive(session: Session, webhook_id: str, delivery_ids: Sequence[int], now: int) -> int:
    """Dead deliveries (all, or those listed) back to pending, due now, with a fresh age."""
    query = update(DeliveryRow).where(
        DeliveryRow.webhook_id == webhook_id, DeliveryRow.status == "dead"
    )
    if delivery_ids:
        query = query.where(DeliveryRow.delivery_id.in_(delivery_ids))
    result = session.execute(
        query.values(status="pending", attempts=0, created_ms=now, next_attempt_ms=now)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]
