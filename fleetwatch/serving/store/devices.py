"""Devices: the registry (operators) merged with what the records say (state, sessions, …)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, delete, exists, func, select
from sqlalchemy.orm import Session

from fleetwatch.serving.store.pages import Paged, page
from fleetwatch.serving.tables import (
    AlertRow,
    DeviceRow,
    DeviceStateRow,
    DeviceTagRow,
    ModelRow,
    RateLimitRow,
    ReadingRow,
    SessionRow,
)


@dataclass(frozen=True)
class DeviceView:
    device: DeviceRow
    tags: list[str]
    state: DeviceStateRow | None

    @property
    def status(self) -> str:
        return self.state.status if self.state is not None else "unknown"


def _filters(status: str | None, kind: str | None, tag: str | None) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if kind is not None:
        where.append(DeviceRow.kind == kind)
    if tag is not None:
        where.append(
            exists().where(DeviceTagRow.device_id == DeviceRow.device_id, DeviceTagRow.tag == tag)
        )
    if status == "unknown":
        where.append(DeviceStateRow.device_id.is_(None))
    elif status is not None:
        where.append(DeviceStateRow.status == status)
    return where


def _joined() -> Select[DeviceRow, DeviceStateRow]:
    return select(DeviceRow, DeviceStateRow).outerjoin(
        DeviceStateRow, DeviceStateRow.device_id == DeviceRow.device_id
    )


def list_devices(
    session: Session,
    status: str | None,
    kind: str | None,
    tag: str | None,
    limit: int,
    offset: int,
) -> tuple[list[DeviceView], int]:
    where = _filters(status, kind, tag)
    total = session.scalar(
        select(func.count())
        .select_from(DeviceRow)
        .outerjoin(DeviceStateRow, DeviceStateRow.device_id == DeviceRow.device_id)
        .where(*where)
    )
    rows = session.execute(
        _joined().where(*where).order_by(DeviceRow.device_id).limit(limit).offset(offset)
    ).all()
    tags = _tags(session, [d.device_id for d, _ in rows])
    views = [DeviceView(d, tags.get(d.device_id, []), s) for d, s in rows]
    return views, total or 0


def _tags(session: Session, device_ids: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if device_ids:
        for did, tag in session.execute(
            select(DeviceTagRow.device_id, DeviceTagRow.tag)
            .where(DeviceTagRow.device_id.in_(device_ids))
            .order_by(DeviceTagRow.tag)
        ):
            out.setdefault(did, []).append(tag)
    return out


# The single-device reads are the hot path: their statements are built once (building a
# select costs more than SQLite takes to run it) and executed with the id bound.
_ONE_DEVICE = _joined().where(DeviceRow.device_id == bindparam("device_id"))
_ONE_DEVICE_TAGS = (
    select(DeviceTagRow.tag)
    .where(DeviceTagRow.device_id == bindparam("device_id"))
    .order_by(DeviceTagRow.tag)
)
_ALERT_COUNTS = select(func.count(), func.count().filter(AlertRow.state == "open")).where(
    AlertRow.device_id == bindparam("device_id")
)
_LAST_ALERT = (
    select(AlertRow)
    .where(AlertRow.device_id == bindparam("device_id"))
    .order_by(AlertRow.start_ms.desc(), AlertRow.alert_id)
    .limit(1)
)


def get_device(session: Session, device_id: str) -> DeviceView | None:
    bound = {"device_id": device_id}
    row = session.execute(_ONE_DEVICE, bound).first()
    if row is None:
        return None
    tags = list(session.scalars(_ONE_DEVICE_TAGS, bound).all())
    return DeviceView(row[0], tags, row[1])


@dataclass(frozen=True)
class AlertCounts:
    total: int
    open: int
    last: AlertRow | None


def alert_counts(session: Session, device_id: str) -> AlertCounts:
    bound = {"device_id": device_id}
    total, open_ = session.execute(_ALERT_COUNTS, bound).one()
    last = session.scalars(_LAST_ALERT, bound).first()
    return AlertCounts(total, open_, last)


def register(session: Session, device_id: str, fields: dict[str, Any], now: int) -> bool:
    """Register a device (or claim a discovered one); False if it was registered already."""
    row = session.get(DeviceRow, device_id)
    if row is not None and row.registered:
        return False
    tags = fields.pop("tags", [])
    if row is None:
        row = DeviceRow(device_id=device_id, created_ms=now)
        session.add(row)
    row.kind = fields.get("kind") or row.kind
    row.name = fields.get("name")
    row.attributes = fields.get("attributes") or {}
    row.registered = True
    row.updated_ms = now
    session.flush()
    set_tags(session, device_id, tags)
    return True


def update_device(session: Session, device_id: str, fields: dict[str, Any], now: int) -> bool:
    row = session.get(DeviceRow, device_id)
    if row is None:
        return False
    tags = fields.pop("tags", None)
    for name, value in fields.items():
        setattr(row, name, value)
    row.updated_ms = now
    if tags is not None:
        set_tags(session, device_id, tags)
    return True


def set_tags(session: Session, device_id: str, tags: Sequence[str]) -> None:
    session.execute(delete(DeviceTagRow).where(DeviceTagRow.device_id == device_id))
    session.add_all(DeviceTagRow(device_id=device_id, tag=t) for t in sorted(set(tags)))


def delete_device(session: Session, device_id: str) -> bool:
    """Forget a device and everything materialised about it (its alerts and commands stay)."""
    if session.get(DeviceRow, device_id) is None:
        return False
    for table in (DeviceTagRow, DeviceStateRow, SessionRow, ReadingRow, ModelRow, RateLimitRow):
        session.execute(delete(table).where(table.device_id == device_id))
    session.execute(delete(DeviceRow).where(DeviceRow.device_id == device_id))
    return True


def known(session: Session, device_id: str) -> bool:
    return session.get(DeviceRow, device_id) is not None


def sessions(session: Session, device_id: str, limit: int, offset: int) -> Paged[SessionRow]:
    where = [SessionRow.device_id == device_id]
    return page(session, SessionRow, where, [SessionRow.start_ms.desc()], limit, offset)


def readings(
    session: Session, device_id: str, from_ms: int | None, to_ms: int | None, limit: int
) -> list[ReadingRow]:
    """The most recent ``limit`` readings in [from_ms, to_ms), oldest first."""
    query = select(ReadingRow).where(ReadingRow.device_id == device_id)
    if from_ms is not None:
        query = query.where(ReadingRow.event_ms >= from_ms)
    if to_ms is not None:
        query = query.where(ReadingRow.event_ms < to_ms)
    rows = session.scalars(query.order_by(ReadingRow.event_ms.desc()).limit(limit)).all()
    return list(reversed(rows))


def model(session: Session, device_id: str) -> ModelRow | None:
    return session.get(ModelRow, device_id)


def rate_limited(session: Session, device_id: str) -> RateLimitRow | None:
    """The device's latest run of messages the gateway dead-lettered for its rate, if any."""
    return session.get(RateLimitRow, device_id)
