"""Alert episodes: list, filter, detail and acknowledgement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, bindparam, func, select, update
from sqlalchemy.orm import Session

from fleetwatch.serving.tables import AlertEventRow, AlertRow, CommandRow


@dataclass(frozen=True)
class AlertFilter:
    device_id: str | None = None
    rule_id: str | None = None
    severity: str | None = None
    state: str | None = None
    acknowledged: bool | None = None
    from_ms: int | None = None
    to_ms: int | None = None

    def where(self) -> list[ColumnElement[bool]]:
        out: list[ColumnElement[bool]] = []
        if self.device_id is not None:
            out.append(AlertRow.device_id == self.device_id)
        if self.rule_id is not None:
            out.append(AlertRow.rule_id == self.rule_id)
        if self.severity is not None:
            out.append(AlertRow.severity == self.severity)
        if self.state is not None:
            out.append(AlertRow.state == self.state)
        if self.acknowledged is not None:
            out.append(
                AlertRow.acknowledged_ms.is_not(None)
                if self.acknowledged
                else AlertRow.acknowledged_ms.is_(None)
            )
        if self.from_ms is not None:
            out.append(AlertRow.start_ms >= self.from_ms)
        if self.to_ms is not None:
            out.append(AlertRow.start_ms < self.to_ms)
        return out


_BY_DEVICE_COUNT = (
    select(func.count()).select_from(AlertRow).where(AlertRow.device_id == bindparam("device_id"))
)
_BY_DEVICE = (
    select(AlertRow.__table__)
    .where(AlertRow.device_id == bindparam("device_id"))
    .order_by(AlertRow.start_ms.desc(), AlertRow.alert_id)
    .limit(bindparam("limit"))
    .offset(bindparam("offset"))
)


def list_alerts(
    session: Session, where: AlertFilter, limit: int, offset: int
) -> tuple[list[dict[str, Any]], int]:
    """Episodes, newest start first, as plain column mappings (no ORM objects: this is the hot
    read path; one device's alerts, the commonest query, runs statements built once)."""
    if where == AlertFilter(device_id=where.device_id) and where.device_id is not None:
        bound = {"device_id": where.device_id, "limit": limit, "offset": offset}
        total = session.scalar(_BY_DEVICE_COUNT, bound) or 0
        found = session.execute(_BY_DEVICE, bound).mappings()
        return [dict(r) for r in found], total
    conditions = where.where()
    total = session.scalar(select(func.count()).select_from(AlertRow).where(*conditions)) or 0
    rows = session.execute(
        select(AlertRow.__table__)
        .where(*conditions)
        .order_by(AlertRow.start_ms.desc(), AlertRow.alert_id)
        .limit(limit)
        .offset(offset)
    ).mappings()
    return [dict(r) for r in rows], total


@dataclass(frozen=True)
class AlertDetailView:
    alert: AlertRow
    events: list[AlertEventRow]
    commands: list[str]


def get_alert(session: Session, alert_id: str) -> AlertDetailView | None:
    row = session.get(AlertRow, alert_id)
    if row is None:
        return None
    events = session.scalars(
        select(AlertEventRow)
        .where(AlertEventRow.alert_id == alert_id)
        .order_by(AlertEventRow.revision)
    ).all()
    commands = session.scalars(
        select(CommandRow.command_id)
        .where(CommandRow.alert_id == alert_id)
        .order_by(CommandRow.issued_ms)
    ).all()
    return AlertDetailView(row, list(events), list(commands))


def acknowledge(session: Session, alert_id: str, by: str, comment: str, now: int) -> bool:
    result = session.execute(
        update(AlertRow)
        .where(AlertRow.alert_id == alert_id)
        .values(acknowledged_by=by, acknowledged_ms=now, ack_comment=comment)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]
