"""What the materialiser writes: every write is an idempotent upsert, so a redelivered batch
changes nothing, and records arriving out of order never replace newer ones."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Table, and_, delete, or_, select, true, update
from sqlalchemy.orm import Session

from fleetwatch.contracts.alerts import Alert, event_id
from fleetwatch.contracts.commands import CommandAck
from fleetwatch.contracts.deadletter import RATE_LIMITED_RUN_S
from fleetwatch.contracts.devices import DeviceSession, DeviceState
from fleetwatch.contracts.telemetry import TelemetryRecord
from fleetwatch.serving.store.upsert import insert_ignore, upsert
from fleetwatch.serving.tables import (
    AlertEventRow,
    AlertRow,
    CommandRow,
    DeviceRow,
    DeviceStateRow,
    ModelRow,
    RateLimitRow,
    ReadingRow,
    SessionRow,
)

T = TypeVar("T")

STATE_OF_STATUS = {"open": "open", "update": "open", "resolve": "resolved", "withdraw": "withdrawn"}


def _t(table: Any) -> Table:
    return table.__table__  # type: ignore[no-any-return]


class ModelRecord(BaseModel):
    """A ``model.params`` record (see ``fleetwatch/models/params.py`` and docs/DESIGN.md)."""

    model_config = ConfigDict(frozen=True)

    device_id: str
    kind: str
    version: int
    trained_from_ms: int | None
    trained_to_ms: int | None
    published_ms: int | None
    params: dict[str, Any]


@dataclass(frozen=True)
class AckRecord:
    """A ``device.command-acks`` record: the device's answer and the device it came from
    (``None`` if the record does not say; then the command id alone decides)."""

    ack: CommandAck
    device_id: str | None = None


@dataclass(frozen=True)
class RateLimited:
    """A message of ``device_id`` the gateway dead-lettered for its rate at ``at_ms`` (its
    clock), read from ``telemetry.deadletter`` at ``partition`` and ``offset``."""

    device_id: str
    at_ms: int
    partition: int
    offset: int


@dataclass
class Batch:
    """One poll's worth of decoded records, by kind."""

    alerts: list[Alert] = field(default_factory=list)
    early: list[Alert] = field(default_factory=list)
    """Early opens of rules (``alerts.fast``): :mod:`fleetwatch.serving.store.early` folds
    them in."""
    states: list[DeviceState] = field(default_factory=list)
    sessions: list[DeviceSession] = field(default_factory=list)
    acks: list[AckRecord] = field(default_factory=list)
    models: list[ModelRecord] = field(default_factory=list)
    readings: list[TelemetryRecord] = field(default_factory=list)
    rate_limited: list[RateLimited] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    """Devices whose parameters the trainer withdrew (a tombstone on ``model.params``: it
    forgot them); :attr:`models` holds only their records after it."""
    gone_states: list[str] = field(default_factory=list)
    """Devices the scorer forgot (a tombstone on ``device.state``); :attr:`states` holds only
    their records after it."""
    gone_sessions: list[str] = field(default_factory=list)
    """Keys of tombstones on ``device.sessions``: a device the scorer forgot (its sessions go)
    or a session; :attr:`sessions` holds only their records after it."""

    def forget_model(self, device_id: str) -> None:
        """A tombstone: the device's model row goes, and its records before it in the poll."""
        self.models = [m for m in self.models if m.device_id != device_id]
        self.forgotten.append(device_id)

    def forget_state(self, device_id: str) -> None:
        """A tombstone: the device's state row goes, and its records before it in the poll."""
        self.states = [s for s in self.states if s.device_id != device_id]
        self.gone_states.append(device_id)

    def forget_sessions(self, key: str) -> None:
        """A tombstone under a device id (the scorer forgot the device: all its sessions go)
        or a session id (that session goes); their records before it in the poll go too."""
        self.sessions = [s for s in self.sessions if key not in (s.device_id, s.session_id)]
        self.gone_sessions.append(key)

    def __len__(self) -> int:
        return sum(
            len(x)
            for x in (
                self.alerts,
                self.early,
                self.states,
                self.sessions,
                self.acks,
                self.forgotten,
                self.gone_states,
                self.gone_sessions,
                self.models,
                self.readings,
                self.rate_limited,
            )
        )

    def each(self) -> Iterator[tuple[str, Batch]]:
        """Every record on its own, as ``(kind, one-record batch)``, in :func:`write`'s
        order of kinds (``kind`` is the field's name: ``alerts``, ``states``, …)."""
        kinds = (
            "alerts",
            "early",
            "gone_states",
            "states",
            "gone_sessions",
            "sessions",
            "forgotten",
            "models",
            "readings",
            "rate_limited",
            "acks",
        )
        for kind in kinds:
            for record in getattr(self, kind):
                yield kind, Batch(**{kind: [record]})


@dataclass(frozen=True)
class AckOutcome:
    command_id: str
    status: str
    """acked, failed, or late (the command had timed out already)."""


def write(session: Session, batch: Batch, now: int) -> list[AckOutcome]:
    """Write a batch; returns what the acknowledgements did to their commands."""
    _discover(session, batch, now)
    write_alerts(session, batch.alerts, now)
    _forget_states(session, batch.gone_states)
    _write_states(session, batch.states)
    _forget_sessions(session, batch.gone_sessions)
    _write_sessions(session, batch.sessions)
    _forget_models(session, batch.forgotten)
    _write_models(session, batch.models)
    _write_readings(session, batch.readings)
    _write_rate_limits(session, batch.rate_limited)
    return _write_acks(session, batch.acks, now)


def _discover(session: Session, batch: Batch, now: int) -> None:
    """Every device with a record becomes known (unregistered; its kind is what the registry
    says, since readings do not carry one)."""
    kinds: dict[str, str | None] = {}
    for did in (
        *(a.device_id for a in batch.alerts),
        *(s.device_id for s in batch.sessions),
        *(m.device_id for m in batch.models),
        *(r.device_id for r in batch.readings),
    ):
        kinds.setdefault(did, None)
    for state in batch.states:
        kinds.setdefault(state.device_id, None)
    rows: list[dict[str, Any]] = [
        {
            "device_id": did,
            "kind": kind,
            "name": None,
            "attributes": {},
            "registered": False,
            "created_ms": now,
            "updated_ms": now,
        }
        for did, kind in sorted(kinds.items())
    ]
    upsert(
        session,
        _t(DeviceRow),
        rows,
        key=["device_id"],
        update=["kind"],
        when=lambda t, x: and_(t.kind.is_(None), x.kind.is_not(None)),
    )


def write_alerts(session: Session, alerts: Iterable[Alert], now: int) -> None:
    """Events → history; episodes → one row each with the latest revision's fields."""
    events: dict[str, dict[str, Any]] = {}
    latest: dict[str, Alert] = {}
    for a in alerts:
        eid = a.event_id or event_id(a.alert_id, a.revision)
        events[eid] = {
            "event_id": eid,
            "alert_id": a.alert_id,
            "revision": a.revision,
            "status": a.status,
            "severity": a.severity,
            "seq": a.seq,
            "event_ms": a.event_ms,
            "detected_ms": a.detected_ms,
            "stored_ms": now,
            "value": a.value,
            "score": a.score,
            "reason": a.reason[:512],
        }
        if a.alert_id not in latest or latest[a.alert_id].revision < a.revision:
            latest[a.alert_id] = a
    insert_ignore(session, _t(AlertEventRow), list(events.values()))
    rows = [episode_row(a, now) for a in latest.values()]
    upsert(
        session,
        _t(AlertRow),
        rows,
        key=["alert_id"],
        update=EPISODE_UPDATES,
        when=lambda t, x: t.revision < x.revision,
    )


EPISODE_UPDATES = [
    "severity",
    "status",
    "state",
    "revision",
    "end_ms",
    "params_version",
    "seq",
    "event_ms",
    "received_ms",
    "detected_ms",
    "updated_ms",
    "value",
    "expected",
    "band",
    "score",
    "reason",
    "rule_id",
    "rule_version",
]


def episode_row(a: Alert, now: int) -> dict[str, Any]:
    return {
        "alert_id": a.alert_id,
        "device_id": a.device_id,
        "metric": a.metric,
        "detector": a.detector,
        "severity": a.severity,
        "status": a.status,
        "state": STATE_OF_STATUS[a.status],
        "revision": a.revision,
        "start_ms": a.start_ms if a.start_ms is not None else a.event_ms,
        "end_ms": a.end_ms,
        "params_version": a.params_version,
        "seq": a.seq,
        "event_ms": a.event_ms,
        "received_ms": a.received_ms,
        "detected_ms": a.detected_ms,
        "stored_ms": now,
        "updated_ms": now,
        "value": a.value,
        "expected": a.expected,
        "band": a.band,
        "score": a.score,
        "reason": a.reason[:512],
        "rule_id": a.rule_id,
        "rule_version": a.rule_version,
        "acknowledged_by": None,
        "acknowledged_ms": None,
        "ack_comment": None,
    }


def _newest(items: Iterable[T], key: Callable[[T], str], order: Callable[[T], int]) -> list[T]:
    """Per ``key``, the item of the highest ``order`` (the later of equals), in the order the
    keys first come."""
    newest: dict[str, T] = {}
    for item in items:
        k = key(item)
        if k not in newest or order(newest[k]) <= order(item):
            newest[k] = item
    return list(newest.values())


def _write_per_device(
    session: Session, table: Any, rows: list[dict[str, Any]], when: Callable[[Any, Any], Any]
) -> None:
    """Upsert one row per device: every column replaced where ``when`` holds."""
    columns = [c.name for c in _t(table).columns if c.name != "device_id"]
    upsert(session, _t(table), rows, key=["device_id"], update=columns, when=when)


def _write_states(session: Session, states: list[DeviceState]) -> None:
    newest = _newest(states, lambda s: s.device_id, lambda s: s.updated_ms)
    rows = [s.model_dump() for s in newest]
    _write_per_device(session, DeviceStateRow, rows, lambda t, x: t.updated_ms <= x.updated_ms)


def _write_sessions(session: Session, sessions: list[DeviceSession]) -> None:
    newest = _newest(sessions, lambda s: s.session_id, lambda s: s.readings)
    rows = [s.model_dump() for s in newest]
    upsert(
        session,
        _t(SessionRow),
        rows,
        key=["session_id"],
        update=["end_ms", "readings", "last_seq", "end_reason"],
        when=lambda t, x: or_(t.readings <= x.readings, x.end_reason.is_not(None)),
    )


def _forget_states(session: Session, device_ids: list[str]) -> None:
    """The scorer forgot these devices: their state rows go (a device heard again starts
    afresh)."""
    if device_ids:
        table = _t(DeviceStateRow)
        session.execute(delete(table).where(table.c.device_id.in_(sorted(set(device_ids)))))


def _forget_sessions(session: Session, keys: list[str]) -> None:
    """Tombstones on ``device.sessions``: the sessions of a device the scorer forgot (the key
    is its id), or the one session of the key."""
    if keys:
        table, gone = _t(SessionRow), sorted(set(keys))
        session.execute(
            delete(table).where(or_(table.c.device_id.in_(gone), table.c.session_id.in_(gone)))
        )


def _forget_models(session: Session, device_ids: list[str]) -> None:
    """The trainer forgot these devices: their model rows go (their versions start again), and
    so do their readings (a device silent that long has nothing recent to show)."""
    if device_ids:
        forgotten = sorted(set(device_ids))
        for table in (_t(ModelRow), _t(ReadingRow)):
            session.execute(delete(table).where(table.c.device_id.in_(forgotten)))


def _write_models(session: Session, models: list[ModelRecord]) -> None:
    newest = _newest(models, lambda m: m.device_id, lambda m: m.version)
    rows = [m.model_dump() for m in newest]
    _write_per_device(session, ModelRow, rows, lambda t, x: t.version <= x.version)


def _write_readings(session: Session, readings: list[TelemetryRecord]) -> None:
    rows = {
        (r.device_id, r.seq, r.device_event_ms): {
            "device_id": r.device_id,
            "seq": r.seq,
            "device_event_ms": r.device_event_ms,
            "event_ms": r.event_ms,
            "received_ms": r.received_ms,
            "metrics": r.metrics,
        }
        for r in readings
    }
    insert_ignore(session, _t(ReadingRow), list(rows.values()))


def _write_rate_limits(session: Session, hits: list[RateLimited]) -> None:
    """Each device's run of rate-limited dead letters goes on, or a new one starts after
    ``RATE_LIMITED_RUN_S`` without one. A dead letter at or before the place of the newest one
    counted (a poll read again after a crash) is not counted twice: a device's dead letters
    are in one partition (keyed by the device), in order."""
    if not hits:
        return
    devices = sorted({h.device_id for h in hits})
    runs: dict[str, dict[str, Any]] = {
        row.device_id: {c.name: getattr(row, c.name) for c in _t(RateLimitRow).columns}
        for row in session.scalars(select(RateLimitRow).where(RateLimitRow.device_id.in_(devices)))
    }
    changed: set[str] = set()
    for hit in sorted(hits, key=lambda h: (h.partition, h.offset)):
        run = runs.get(hit.device_id)
        if run is not None and _counted(run, hit):
            continue
        if run is None or hit.at_ms - run["last_ms"] >= RATE_LIMITED_RUN_S * 1000:
            run = runs[hit.device_id] = {
                "device_id": hit.device_id,
                "since_ms": hit.at_ms,
                "last_ms": hit.at_ms,
                "dead_letters": 0,
            }
        run["dead_letters"] += 1
        run["last_ms"] = max(run["last_ms"], hit.at_ms)
        run["source_partition"], run["source_offset"] = hit.partition, hit.offset
        changed.add(hit.device_id)
    rows = [runs[d] for d in sorted(changed)]
    columns = [c.name for c in _t(RateLimitRow).columns if c.name != "device_id"]
    upsert(session, _t(RateLimitRow), rows, key=["device_id"], update=columns)


def _counted(run: dict[str, Any], hit: RateLimited) -> bool:
    """Whether the run has counted ``hit`` already: it is at or before the newest one counted
    in the same partition."""
    return bool(run["source_partition"] == hit.partition and hit.offset <= run["source_offset"])


def prune_readings(
    session: Session, device_ids: Iterable[str], keep: int, older_than_ms: int | None = None
) -> int:
    """Keep the ``keep`` latest readings (event time) of each device, and none with an event
    time before ``older_than_ms``; returns rows deleted."""
    deleted = 0
    for did in device_ids:
        if older_than_ms is not None:
            result = session.execute(
                delete(ReadingRow).where(
                    ReadingRow.device_id == did, ReadingRow.event_ms < older_than_ms
                )
            )
            deleted += result.rowcount  # type: ignore[attr-defined]
        cutoff = session.scalar(
            select(ReadingRow.event_ms)
            .where(ReadingRow.device_id == did)
            .order_by(ReadingRow.event_ms.desc())
            .offset(keep - 1)
            .limit(1)
        )
        if cutoff is not None:
            result = session.execute(
                delete(ReadingRow).where(ReadingRow.device_id == did, ReadingRow.event_ms < cutoff)
            )
            deleted += result.rowcount  # type: ignore[attr-defined]
    return deleted


def _write_acks(session: Session, acks: list[AckRecord], now: int) -> list[AckOutcome]:
    """A device answers only its own commands: an ack from another device changes nothing."""
    outcomes: list[AckOutcome] = []
    for record in acks:
        ack = record.ack
        status = "acked" if ack.status == "ok" else "failed"
        mine = CommandRow.device_id == record.device_id if record.device_id is not None else true()
        answered = session.execute(
            update(CommandRow)
            .where(CommandRow.command_id == ack.command_id, mine)
            .where(CommandRow.status.in_(("pending", "sent")))
            .values(
                status=status,
                ack_status=ack.status,
                detail=ack.detail,
                device_ms=ack.device_ms,
                answered_ms=now,
            )
        )
        if answered.rowcount:  # type: ignore[attr-defined]
            outcomes.append(AckOutcome(ack.command_id, status))
            continue
        late = session.execute(
            update(CommandRow)
            .where(CommandRow.command_id == ack.command_id, mine)
            .where(CommandRow.status == "timed_out", CommandRow.ack_status.is_(None))
            .values(
                ack_status=ack.status,
                detail=f"acknowledged after the timeout: {ack.detail}"[:512],
                device_ms=ack.device_ms,
                answered_ms=now,
            )
        )
        if late.rowcount:  # type: ignore[attr-defined]
            outcomes.append(AckOutcome(ack.command_id, "late"))
    return outcomes
