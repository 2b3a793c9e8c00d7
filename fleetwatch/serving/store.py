"""The API's database: alerts materialised from Kafka. SQLite by default, any SQLAlchemy URL."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import BigInteger, Float, String, create_engine, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from fleetwatch.contracts.alerts import Alert


class Base(DeclarativeBase):
    pass


class AlertRow(Base):
    __tablename__ = "alerts"

    alert_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    device_id: Mapped[str] = mapped_column(String(128), index=True)
    metric: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    detector: Mapped[str] = mapped_column(String(64))
    params_version: Mapped[int] = mapped_column(BigInteger)
    seq: Mapped[int] = mapped_column(BigInteger)
    event_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    received_ms: Mapped[int] = mapped_column(BigInteger)
    detected_ms: Mapped[int] = mapped_column(BigInteger)
    stored_ms: Mapped[int] = mapped_column(BigInteger)
    value: Mapped[float] = mapped_column(Float)
    expected: Mapped[float] = mapped_column(Float)
    band: Mapped[float] = mapped_column(Float)
    score: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(String(512))


@dataclass(frozen=True)
class DeviceSummary:
    device_id: str
    alert_count: int
    last_alert: AlertRow | None


class AlertStore:
    def __init__(self, url: str) -> None:
        connect_args = {"check_same_thread": False} if url.startswith("sqlite") else {}
        self.engine: Engine = create_engine(url, connect_args=connect_args)
        Base.metadata.create_all(self.engine)

    def add(self, alerts: Sequence[Alert], stored_ms: int) -> int:
        """Insert the alerts not stored yet (ids are deterministic); returns how many were new."""
        if not alerts:
            return 0
        unique = {a.alert_id: a for a in alerts}
        with Session(self.engine) as session, session.begin():
            known = set(
                session.scalars(
                    select(AlertRow.alert_id).where(AlertRow.alert_id.in_(unique))
                ).all()
            )
            new = [a for a in unique.values() if a.alert_id not in known]
            columns = set(AlertRow.__table__.columns.keys())
            session.add_all(
                AlertRow(**a.model_dump(include=columns), stored_ms=stored_ms) for a in new
            )
        return len(new)

    def alerts(
        self, device_id: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[AlertRow]:
        query = select(AlertRow).order_by(AlertRow.event_ms.desc(), AlertRow.alert_id)
        if device_id is not None:
            query = query.where(AlertRow.device_id == device_id)
        with Session(self.engine) as session:
            return list(session.scalars(query.limit(limit).offset(offset)).all())

    def device(self, device_id: str) -> DeviceSummary | None:
        with Session(self.engine) as session:
            count = session.scalar(select(func.count()).where(AlertRow.device_id == device_id)) or 0
            if count == 0:
                return None
            last = session.scalars(
                select(AlertRow)
                .where(AlertRow.device_id == device_id)
                .order_by(AlertRow.event_ms.desc(), AlertRow.alert_id)
                .limit(1)
            ).first()
        return DeviceSummary(device_id, count, last)

    def close(self) -> None:
        self.engine.dispose()
