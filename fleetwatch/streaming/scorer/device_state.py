"""What the scorer keeps of one device between micro-batches, and the record it publishes of it
on ``device.state``.

A :class:`DeviceScoringState` is a ``TypedDict``: a plain dict at run time holding only JSON's
types (dicts with string keys, lists, strings, numbers, ``None``; tested), which the processor
pickles into the bucket's state value (:mod:`~fleetwatch.streaming.scorer.processor`) and gets
back exactly, NaN included. Renaming or adding a field changes that value's layout: bump
:data:`~fleetwatch.streaming.scorer.job.PLAN_VERSION`.
"""

from __future__ import annotations

from typing import Any, TypeAlias, TypedDict

from fleetwatch.streaming.scorer.output import Output, Role
from fleetwatch.streaming.scorer.readings import Rows

SessionRecord: TypeAlias = dict[str, Any]
"""A device's session as published on ``device.sessions``: the fields of
:class:`~fleetwatch.contracts.devices.DeviceSession`, in a plain dict (its ``model_dump()``)."""


class DeviceScoringState(TypedDict):
    """One device in the scorer."""

    params_version: int
    """The version of the parameters in use (0: none yet, the fixed baseline)."""
    seen_seqs: list[list[int]]
    """``[lowest seq, highest seq, newest event_ms]`` ranges of readings seen within the
    allowed lateness (repeats of them are duplicates)."""
    max_seq: int | None
    """The highest sequence number of the session (a lower one with a later device clock is a
    reboot)."""
    last_device_ms: int | None
    """The device clock of the newest reading."""
    last_seen_ms: int | None
    """The event time of the newest reading."""
    last_seq: int | None
    last_received_ms: int | None
    last_values: dict[str, float]
    """Metric → its newest value."""
    clock_offset_ms: int
    firmware: str | None
    session: SessionRecord | None
    """The open session, if any."""
    episodes: list[dict[str, Any]]
    """The alert episodes under way
    (:meth:`~fleetwatch.streaming.scorer.episodes.Lifecycle.dump`)."""
    timer_ms: int | None
    """The event-time timer registered for the device (``None``: none pending)."""
    status: str
    """``ok``, ``alerting``, ``silent`` or ``quarantined``."""
    failures: int
    """Micro-batches of the device that failed in a row (:mod:`~fleetwatch.streaming.scorer.
    quarantine`)."""
    quarantined_ms: int | None
    """When its quarantine began (wall clock), if it is quarantined."""
    quarantined_until_ms: int | None
    """When its quarantine ends (wall clock), if it is quarantined."""
    quarantine_reason: str | None
    """Why its last batch failed."""
    late_readings: int
    """Readings behind the watermark, so far."""
    late_heard_ms: int | None
    """The newest event time among them: they were sent, so no dropout before it."""
    recent_values: dict[str, list[float]]
    """Metric → the values of the latest in-order readings (the flat-line windows;
    :class:`~fleetwatch.models.base.ScoringMemory`)."""
    local_trends: dict[str, list[float]]
    """Metric → the change detector's local line after them (:mod:`fleetwatch.models.trend`)."""
    level_averages: dict[str, list[float]]
    """Metric → what the level detector's average carries past them: the average, its alert
    under way and its last reading's side (:data:`fleetwatch.models.level.CARRY`)."""
    joint_surprise: list[float]
    """What the PCA member's evidence of a lasting break carries on from the newest readings
    with every metric, ``[]``: none (:mod:`fleetwatch.models.lasting`: a tie broken for one
    reading alone is seldom an alert)."""
    familiar_moves: dict[str, Any]
    """Metric → ``[the event time of the device's move into a state its fleet knows, the value
    the metric moved to]``, while that metric's own alerts are held
    (:mod:`~fleetwatch.streaming.scorer.device_moves`)."""
    open_windows: dict[str, dict[str, list[float]]]
    """Event-time windows not final yet: start → metric → accumulators
    (:mod:`~fleetwatch.streaming.scorer.windows`)."""
    closed_windows: dict[str, dict[str, Any]]
    """Metric → the features of its newest final window."""
    duplicate_readings: int
    """Repeated readings dropped, so far."""
    published_signature: list[Any] | None
    """What the last published state record said (status, open alerts, parameter version,
    session, newest window): a change publishes a new one."""
    published_at_ms: int | None
    """The event time of the last published state record."""


def new_state() -> DeviceScoringState:
    return {
        "params_version": 0,
        "seen_seqs": [],
        "max_seq": None,
        "last_device_ms": None,
        "last_seen_ms": None,
        "last_seq": None,
        "last_received_ms": None,
        "last_values": {},
        "clock_offset_ms": 0,
        "firmware": None,
        "session": None,
        "episodes": [],
        "timer_ms": None,
        "status": "ok",
        "failures": 0,
        "quarantined_ms": None,
        "quarantined_until_ms": None,
        "quarantine_reason": None,
        "late_readings": 0,
        "late_heard_ms": None,
        "recent_values": {},
        "local_trends": {},
        "level_averages": {},
        "joint_surprise": [],
        "familiar_moves": {},
        "open_windows": {},
        "closed_windows": {},
        "duplicate_readings": 0,
        "published_signature": None,
        "published_at_ms": None,
    }


def state_record(
    device_id: str, st: DeviceScoringState, open_ids: list[str], now_ms: int
) -> dict[str, Any]:
    """The device's record on ``device.state``
    (:class:`~fleetwatch.contracts.devices.DeviceState`)."""
    session = st["session"]
    return {
        "device_id": device_id,
        "status": st["status"],
        "last_seen_ms": st["last_seen_ms"],
        "last_received_ms": st["last_received_ms"],
        "last_seq": st["last_seq"],
        "last_values": st["last_values"],
        "open_alerts": open_ids,
        "params_version": st["params_version"],
        "clock_offset_ms": st["clock_offset_ms"],
        "firmware": st["firmware"],
        "session_id": None if session is None else session["session_id"],
        "windows": st["closed_windows"],
        "late_readings": int(st["late_readings"]),
        "duplicate_readings": int(st["duplicate_readings"]),
        "quarantined_until_ms": st["quarantined_until_ms"],
        "quarantine_reason": st["quarantine_reason"],
        "updated_ms": now_ms,
    }


def publish(
    device_id: str,
    st: DeviceScoringState,
    in_order: Rows | None,
    open_ids: list[str],
    now_ms: int,
    every_ms: int,
    out: Output,
) -> None:
    """A batch with new readings in the device's state: its newest in-order reading (``None``:
    none), its status from its open alerts (``open_ids``), and its state record (with the open
    session) published when what it says changed — status, open alerts, parameter version, a
    new session, a newer window — or ``every_ms`` of event time after the last time:
    ``device.state`` follows every device closely without a record per reading."""
    if in_order is not None and len(in_order):
        _advance(st, in_order)
    st["status"] = "alerting" if open_ids else "ok"
    session = st["session"]
    signature = [
        st["status"],
        open_ids,
        st["params_version"],
        None if session is None else session["session_id"],
        max((w["end_ms"] for w in st["closed_windows"].values()), default=None),
    ]
    last_ms = int(st["last_seen_ms"] or 0)
    due = st["published_at_ms"] is None or last_ms - int(st["published_at_ms"]) >= every_ms
    if signature == st["published_signature"] and not due:
        return
    st["published_signature"] = signature
    st["published_at_ms"] = last_ms
    out.add(Role.STATE, state_record(device_id, st, open_ids, now_ms))
    if session is not None:
        out.add(Role.SESSIONS, dict(session))


def publish_counts(
    device_id: str, st: DeviceScoringState, late_events: bool, now_ms: int, out: Output
) -> None:
    """A batch with nothing new in it (repeats and readings behind the watermark only): the
    status from the open alerts when late readings changed them (``late_events``), and the
    state record, whose counts of late and repeated readings moved on."""
    if late_events:
        opened = any(e["opened"] for e in st["episodes"])
        st["status"] = "alerting" if opened else "ok"
    if out.late or out.duplicates:
        open_ids = sorted(e["alert_id"] for e in st["episodes"] if e["opened"])
        out.add(Role.STATE, state_record(device_id, st, open_ids, now_ms))


def _advance(st: DeviceScoringState, in_order: Rows) -> None:
    """The newest of the in-order readings as the device's last seen one."""
    event_ms = in_order["event_ms"].tolist()
    seqs = in_order["seq"].tolist()
    last = len(event_ms) - 1
    st["last_seen_ms"] = newest = int(event_ms[last])
    st["last_seq"] = int(seqs[last])
    st["last_device_ms"] = int(in_order["device_event_ms"].item(last))
    st["last_received_ms"] = int(in_order["received_ms"].item(last))
    st["clock_offset_ms"] = int(in_order["clock_offset_ms"].item(last))
    firmware = in_order["firmware"][last]
    st["firmware"] = None if firmware is None or firmware != firmware else str(firmware)
    vals = dict(st["last_values"])
    metrics, values = in_order["metric"].tolist(), in_order["value"].tolist()
    if event_ms.count(newest) == len(event_ms):  # every row is of the newest reading(s)
        vals.update(zip(map(str, metrics), map(float, values), strict=True))
    else:
        vals.update(
            (str(m), float(v))
            for m, v, e in zip(metrics, values, event_ms, strict=True)
            if e == newest  # the metrics of the newest reading(s)
        )
    st["last_values"] = vals
    top = int(max(seqs))
    st["max_seq"] = top if st["max_seq"] is None else max(int(st["max_seq"]), top)
