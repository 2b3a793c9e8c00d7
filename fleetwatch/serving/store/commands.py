"""Commands and their lifecycle: pending → sent → acked | failed | timed_out."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from fleetwatch.serving.tables import CommandRow

OPEN = ("pending", "sent")


def find(session: Session, device_id: str, idempotency_key: str) -> CommandRow | None:
    return session.scalars(
        select(CommandRow).where(
            CommandRow.device_id == device_id, CommandRow.idempotency_key == idempotency_key
        )
    ).first()


def add(session: Session, **fields: Any) -> CommandRow:
    row = CommandRow(status="pending", detail="", **fields)
    session.add(row)
    return row


def mark_sent(session: Session, command_id: str, now: int) -> bool:
    result = session.execute(
        update(CommandRow)
        .where(CommandRow.command_id == command_id, CommandRow.status == "pending")
        .values(status="sent", sent_ms=now, detail="")
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def note(session: Session, command_id: str, detail: str) -> None:
    session.execute(
        update(CommandRow)
        .where(CommandRow.command_id == command_id, CommandRow.status == "pending")
        .values(detail=detail[:512])
    )


def expire(session: Session, now: int) -> int:
    """Time out every open command past its TTL; returns how many."""
    result = session.execute(
        update(CommandRow)
        .where(CommandRow.status.in_(OPEN), CommandRow.expires_ms <= now)
        .values(status="timed_out", answered_ms=now)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def unsent(session: Session, older_than_ms: int, limit: int = 100) -> list[CommandRow]:
    """Pending commands whose publication did not go through (Kafka was away, or a crash)."""
    return list(
        session.scalars(
            select(CommandRow)
            .where(CommandRow.status == "pending", CommandRow.issued_ms <= older_than_ms)
            .order_by(CommandRow.issued_ms)
            .limit(limit)
        ).all()
    )
