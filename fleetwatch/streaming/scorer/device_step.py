"""One device's micro-batch in the scorer, pure: its state, new parameters and readings in;
new state and output records out. The Spark job (:mod:`fleetwatch.streaming.scorer.job`) is glue
around :func:`process` and :func:`expire`; the tests call them directly.

Per batch, for one device:

1. the newest ``model.params`` record in the batch (if any) replaces the parameters — the
   stream-table join: from the next reading on, scores use it and carry its version;
2. readings are de-duplicated by ``(seq, device_event_ms)`` against those seen within the
   allowed lateness (the raw log is at-least-once);
3. readings older than the watermark are *late*: written to ``telemetry.late`` with the
   watermark they missed, counted, not scored;
4. the rest are scored with the device's detector (learned parameters; before any, the fixed
   baseline of ``score.baseline``), each detector kind of the combined detector on its own, and
   fed in event-time order to the alert lifecycle (:mod:`episodes`). Readings older than the
   newest already seen (out of order, within the lateness) are scored on their own and may
   correct an alert;
5. sessions: a gap of ``session_gap_s`` in event time or a reboot (the sequence number going
   back while the device clock goes forward) ends one; the session record is re-published as
   it grows;
6. the device's state record (last seen, last values, status, open alerts, parameter version,
   clock offset) is published when anything changed.

A device that falls silent is found by an event-time timer at ``last seen + session gap``
(:func:`expire`): its session ends, its open alerts resolve and its status becomes ``silent``.

Scoring memory that spans batches is the trainer's (the CUSUM sums), as of the parameter
version, except what the device's latest readings give, which the scorer keeps itself
(:class:`~fleetwatch.models.base.ScoringMemory`): the flat-line windows slide over the scorer's
own recent values, the change detector's local lines continue from the scorer's, and the
dropout gap is measured from the scorer's own previous reading (or the newest late one), so a
stale parameter version can neither hide a stuck sensor nor fake a gap.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.contracts.devices import session_id
from fleetwatch.contracts.telemetry import DEVICE_METRICS
from fleetwatch.models.base import ScoringMemory
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.models.registry import default_detector
from fleetwatch.streaming.scorer.detectors import (
    FleetLookup,
    Member,
    borrow_tails,
    champion_of,
    detector_for,
    fleet_prior,
    members_for,
)
from fleetwatch.streaming.scorer.device_moves import Moves
from fleetwatch.streaming.scorer.device_state import (
    DeviceScoringState,
    new_state,
    state_record,
)
from fleetwatch.streaming.scorer.episodes import DROPOUT, Lifecycle
from fleetwatch.streaming.scorer.observations import observations
from fleetwatch.streaming.scorer.quarantine import Rule
from fleetwatch.streaming.scorer.readings import Rows
from fleetwatch.streaming.scorer.windows import WindowSpec
from fleetwatch.streaming.scorer.windows import add as add_to_windows
from fleetwatch.streaming.scorer.windows import close as close_windows

LOOKBACK = default_detector().lookback
"""Values kept per metric while the device's detectors do not say (the default detector's): its
windows are ready when its first parameters arrive."""


class Role(StrEnum):
    """Which output topic a record is for (the job maps them to the configured topic names)."""

    ALERTS = "alerts"
    STATE = "state"
    """The device's state record (``device.state``), not the device-wide alert kind."""
    SESSIONS = "sessions"
    LATE = "late"
    DEADLETTER = "deadletter"


@dataclass(frozen=True)
class Policy:
    session_gap_ms: int
    min_readings: int
    clear_readings: int
    baseline: FixedBaseline
    state_every_ms: int = 5_000
    fleet_model: str = "fallback"
    """``score.fleet_model``: when the scope's champion replaces the device's own multivariate
    detector — ``fallback`` (own one not fitted yet), ``always`` or ``off``."""
    familiar_hold_ms: int = 600_000
    """How long after a device's move into a state its fleet knows its moved metrics' own
    alerts are held at most (``score.new_normal_after_s``;
    :mod:`~fleetwatch.streaming.scorer.device_moves`)."""
    windows: WindowSpec = field(default_factory=lambda: WindowSpec(60_000, 60_000))
    """Event-time windows of the metrics (:mod:`fleetwatch.streaming.scorer.windows`)."""
    quarantine: Rule = field(default_factory=Rule)
    """When failing devices are quarantined, and for how long."""
    expire_after_ms: int = 30 * 24 * 3_600_000
    """A device silent this long in event time leaves the scorer's state."""
    max_metrics: int = DEVICE_METRICS
    """Metric names a device may report (``score.max_metrics``)."""


@dataclass
class Output:
    records: list[tuple[Role, str]] = field(default_factory=list)
    """(role, JSON value); key = device id."""
    late: int = 0
    duplicates: int = 0
    scored: int = 0

    def add(self, role: Role, value: dict[str, Any]) -> None:
        self.records.append((role, json.dumps(value, separators=(",", ":"), allow_nan=False)))


def process(
    device_id: str,
    state: DeviceScoringState | None,
    params_json: str | None,
    readings: pd.DataFrame | Rows,
    watermark_ms: int,
    now_ms: int,
    policy: Policy,
    fleet: FleetLookup | None = None,
) -> tuple[DeviceScoringState, Output]:
    """One micro-batch of one device. ``readings``: one row per (reading, metric) with columns
    ``seq, event_ms, device_event_ms, device_sent_ms, received_ms, clock_offset_ms, firmware,
    status, metric, value``. ``params_json`` is the device's current parameters (after any
    update in this batch) and ``state["params_version"]`` their version; ``fleet`` finds the
    champion of the device's scope (see :attr:`Policy.fleet_model`)."""
    st = new_state() if state is None else state
    out = Output()
    given = Rows.of(readings)
    if len(given) == 0:
        return st, out
    seqs = given["seq"].tolist()
    evs = given["event_ms"].tolist()
    frame = given
    if not _in_order(evs, seqs):
        frame = given.take(np.lexsort((given["seq"], given["event_ms"])))
        seqs = frame["seq"].tolist()
        evs = frame["event_ms"].tolist()
    devs = frame["device_event_ms"].tolist()
    metrics = frame["metric"].tolist()
    ranges: list[list[int]] = st["seen_seqs"]
    last_dev = st["last_device_ms"]
    keep_rows: list[int] = []
    late_rows: list[int] = []
    verdict: dict[tuple[int, int], str] = {}
    taken: set[tuple[int, int, str]] = set()
    for i, (seq, dev, ev, metric) in enumerate(zip(seqs, devs, evs, metrics, strict=True)):
        key = (seq, dev)
        if (seq, dev, metric) in taken:
            continue  # a repeat inside this batch (counted with its reading below)
        taken.add((seq, dev, metric))
        kind = verdict.get(key)
        if kind is None:
            kind = _classify(ranges, seq, dev, ev, last_dev, watermark_ms)
            verdict[key] = kind
            if kind == "dup":
                out.duplicates += 1
            elif kind == "keep":
                if _in_ranges(ranges, seq):  # the same seq after a reboot: a new epoch
                    ranges = []
                _add_seq(ranges, seq, ev)
                last_dev = dev if last_dev is None else max(last_dev, dev)
        if kind == "keep":
            keep_rows.append(i)
        elif kind == "late":
            late_rows.append(i)
    if len(taken) < len(seqs):  # repeats inside the batch: copies of a reading beyond the first
        rows = Counter(zip(seqs, devs, strict=True))
        distinct = Counter((s, d) for s, d, _ in taken)
        out.duplicates += sum(rows[k] // distinct[k] - 1 for k in rows)
    st["seen_seqs"] = [r for r in ranges if r[2] >= watermark_ms]
    late_events: list[dict[str, Any]] = []
    if late_rows:
        late = frame.take(late_rows)
        _write_late(device_id, late, watermark_ms, out)
        late_events = _heard(device_id, st, late, now_ms, policy)
    st["late_readings"] = int(st["late_readings"]) + out.late
    st["duplicate_readings"] = int(st["duplicate_readings"]) + out.duplicates
    if keep_rows:
        kept = frame if len(keep_rows) == len(frame) else frame.take(keep_rows)
        add_to_windows(
            st["open_windows"],
            policy.windows,
            kept["event_ms"].tolist(),
            kept["metric"].tolist(),
            kept["value"].tolist(),
        )
    closed = close_windows(st["open_windows"], policy.windows, watermark_ms)
    if closed:
        st["closed_windows"] = {**st["closed_windows"], **closed}
    if not keep_rows:
        for event in late_events:
            out.add(Role.ALERTS, event)
        if late_events:
            opened = any(e["opened"] for e in st["episodes"])
            st["status"] = "alerting" if opened else "ok"
        if out.late or out.duplicates:
            open_ids = sorted(e["alert_id"] for e in st["episodes"] if e["opened"])
            out.add(Role.STATE, state_record(device_id, st, open_ids, now_ms))
        return st, out
    fresh = frame if len(keep_rows) == len(frame) else frame.take(keep_rows)
    last_ms = st["last_seen_ms"]
    if last_ms is None or int(fresh["event_ms"][0]) >= last_ms:
        in_order, older = fresh, None
    else:
        in_order = fresh.where(fresh["event_ms"] >= last_ms)
        older = fresh.where(fresh["event_ms"] < last_ms)

    lifecycle = _lifecycle(device_id, st, now_ms, policy)
    detector = detector_for(device_id, int(st["params_version"]), params_json)
    champion = champion_of(st, fresh, policy.fleet_model, fleet)
    members = members_for(detector, policy.fleet_model, champion)
    borrow_tails(members, champion)
    prior = fleet_prior(champion)
    if older is not None and len(older):
        arrivals = zip(older["seq"], older["event_ms"], older["received_ms"], strict=True)
        for seq, ev, rx in sorted({(int(a), int(b), int(c)) for a, b, c in arrivals}):
            lifecycle.late_reading(seq, ev, rx)
        for obs in observations(older, members, policy.baseline, set(), prior=prior):
            lifecycle.observe_late(obs)
    if len(in_order):
        _sessions(device_id, st, in_order, policy, out)
        active = set(lifecycle.episodes)
        heard = st["late_heard_ms"]
        gap_from = last_ms if heard is None or last_ms is None else max(last_ms, int(heard))
        memory = ScoringMemory(
            gap_from,
            st["recent_values"],
            st["local_trends"],
            st["level_averages"],
            st["joint_surprise"],
        )
        moves = Moves(st["familiar_moves"], policy.familiar_hold_ms)
        scored = observations(in_order, members, policy.baseline, active, memory, prior, moves)
        for obs in scored:
            lifecycle.observe(obs)
        _advance(st, in_order)
        _slide(memory.recent, in_order, _lookback(members))
    out.scored = sum(1 for kind in verdict.values() if kind == "keep")  # readings, not values
    for event in [*late_events, *lifecycle.events]:
        out.add(Role.ALERTS, event)
    st["episodes"] = lifecycle.dump()
    st["status"] = "alerting" if lifecycle.open_ids else "ok"
    _maybe_state(device_id, st, lifecycle.open_ids, now_ms, policy, out)
    return st, out


def _maybe_state(
    device_id: str,
    st: DeviceScoringState,
    open_ids: list[str],
    now_ms: int,
    policy: Policy,
    out: Output,
) -> None:
    """Publish the state (and the open session) when what it says changed — status, open
    alerts, parameter version, a new session — or ``state_every_ms`` of event time after the
    last time: ``device.state`` follows every device closely without a record per reading."""
    session = st["session"]
    signature = [
        st["status"],
        open_ids,
        st["params_version"],
        None if session is None else session["session_id"],
        max((w["end_ms"] for w in st["closed_windows"].values()), default=None),
    ]
    last_ms = int(st["last_seen_ms"] or 0)
    due = (
        st["published_at_ms"] is None
        or last_ms - int(st["published_at_ms"]) >= policy.state_every_ms
    )
    if signature == st["published_signature"] and not due:
        return
    st["published_signature"] = signature
    st["published_at_ms"] = last_ms
    out.add(Role.STATE, state_record(device_id, st, open_ids, now_ms))
    if session is not None:
        out.add(Role.SESSIONS, dict(session))


def _heard(
    device_id: str, st: DeviceScoringState, late: Rows, now_ms: int, policy: Policy
) -> list[dict[str, Any]]:
    """Readings behind the watermark are not scored, but they were sent: a device whose
    buffered readings arrive late (back from offline) did not drop out. Their event times
    fill the gap of a dropout episode (withdrawn once no gap over its limit is left) and the
    newest of them is where the next dropout gap is measured from (``heard_ms``)."""
    newest = int(late["event_ms"].max())
    heard = st["late_heard_ms"]
    st["late_heard_ms"] = newest if heard is None else max(int(heard), newest)
    if not any(e["kind"] == DROPOUT for e in st["episodes"]):
        return []
    lifecycle = _lifecycle(device_id, st, now_ms, policy)
    arrivals = zip(late["seq"], late["event_ms"], late["received_ms"], strict=True)
    for seq, ev, rx in sorted({(int(a), int(b), int(c)) for a, b, c in arrivals}):
        lifecycle.late_reading(seq, ev, rx)
    st["episodes"] = lifecycle.dump()
    return lifecycle.events


def _lifecycle(device_id: str, st: DeviceScoringState, now_ms: int, policy: Policy) -> Lifecycle:
    """The device's alert episodes as held in its state."""
    return Lifecycle(
        device_id,
        int(st["params_version"]),
        now_ms,
        policy.min_readings,
        policy.clear_readings,
        Lifecycle.load(st["episodes"]),
    )


def _in_order(evs: list[int], seqs: list[int]) -> bool:
    """Whether rows of these event times and sequence numbers are in (event_ms, seq) order
    (a device's readings mostly come so: checked in Python, cheaper than sorting them)."""
    return all(
        (e0, s0) <= (e1, s1) for e0, s0, e1, s1 in zip(evs, seqs, evs[1:], seqs[1:], strict=False)
    )


def _classify(
    ranges: list[list[int]], seq: int, dev: int, ev: int, last_dev: int | None, watermark: int
) -> str:
    """``dup`` (seen within the lateness), ``late`` (behind the watermark) or ``keep``."""
    if _in_ranges(ranges, seq) and (last_dev is None or dev <= last_dev):
        return "dup"
    return "late" if ev < watermark else "keep"


def _in_ranges(ranges: list[list[int]], seq: int) -> bool:
    return any(lo <= seq <= hi for lo, hi, _ in ranges)


def _add_seq(ranges: list[list[int]], seq: int, ev: int) -> None:
    """Record ``seq`` in the sorted, disjoint ``[lo, hi, newest event_ms]`` ranges."""
    for r in ranges:
        if r[0] - 1 <= seq <= r[1] + 1:
            r[0], r[1], r[2] = min(r[0], seq), max(r[1], seq), max(r[2], ev)
            break
    else:
        ranges.append([seq, seq, ev])
    ranges.sort()
    merged: list[list[int]] = []
    for r in ranges:
        if merged and r[0] <= merged[-1][1] + 1:
            top = merged[-1]
            top[1], top[2] = max(top[1], r[1]), max(top[2], r[2])
        else:
            merged.append(r)
    ranges[:] = merged


def expire(
    device_id: str, state: DeviceScoringState, watermark_ms: int, now_ms: int, policy: Policy
) -> tuple[DeviceScoringState, Output, int | None]:
    """The device's timer fired (the watermark passed ``last seen + session gap``, or, once it
    is silent, ``last seen + expire_after``). Returns the new state, the output and the next
    timer to register (``None``: none; for a silent device, it is due to be forgotten:
    :func:`forgotten`)."""
    out = Output()
    st = state
    st["timer_ms"] = None
    last_ms = st["last_seen_ms"]
    if last_ms is None:
        return st, out, None
    if st["status"] == "silent":
        gone = int(last_ms) + policy.expire_after_ms
        if gone > watermark_ms:
            st["timer_ms"] = gone
            return st, out, gone
        return st, out, None
    due = int(last_ms) + policy.session_gap_ms
    if due > watermark_ms:
        st["timer_ms"] = due
        return st, out, due
    if st["session"] is not None:
        session = dict(st["session"], end_reason="gap")
        out.add(Role.SESSIONS, session)
        st["session"] = None
    lifecycle = _lifecycle(device_id, st, now_ms, policy)
    lifecycle.silent(int(last_ms), int(st["last_seq"] or 0), int(st["last_received_ms"] or 0))
    for event in lifecycle.events:
        out.add(Role.ALERTS, event)
    st["episodes"] = lifecycle.dump()
    st["status"] = "silent"
    out.add(Role.STATE, state_record(device_id, st, [], now_ms))
    gone = int(last_ms) + policy.expire_after_ms
    st["timer_ms"] = gone
    return st, out, gone


def forgotten(state: DeviceScoringState, watermark_ms: int, policy: Policy) -> bool:
    """Whether a device has been silent for ``expire_after`` of event time: it leaves the
    scorer's state, and a reading after that starts it afresh."""
    last_ms = state["last_seen_ms"]
    return (
        state["status"] == "silent"
        and last_ms is not None
        and int(last_ms) + policy.expire_after_ms <= watermark_ms
    )


def wants_timer(state: DeviceScoringState, policy: Policy) -> int | None:
    """A timer to register after :func:`process` (none while an earlier one is pending: it
    re-arms; a silent device's expiry timer gives way to the session gap's)."""
    if state["last_seen_ms"] is None:
        return None
    due = int(state["last_seen_ms"]) + policy.session_gap_ms
    pending = state["timer_ms"]
    if pending is not None and int(pending) <= due:
        return None
    state["timer_ms"] = due
    return due


# -- bookkeeping -----------------------------------------------------------------------------


def _advance(st: DeviceScoringState, in_order: Rows) -> None:
    event_ms = in_order["event_ms"].tolist()
    seqs = in_order["seq"].tolist()
    last = len(event_ms) - 1
    st["last_seen_ms"] = newest = int(event_ms[last])
    st["last_seq"] = int(seqs[last])
    st["last_device_ms"] = int(in_order["device_event_ms"][last])
    st["last_received_ms"] = int(in_order["received_ms"][last])
    st["clock_offset_ms"] = int(in_order["clock_offset_ms"][last])
    firmware = in_order["firmware"][last]
    st["firmware"] = None if firmware is None or firmware != firmware else str(firmware)
    vals = dict(st["last_values"])
    metrics, values = in_order["metric"].tolist(), in_order["value"].tolist()
    vals.update(
        (str(m), float(v))
        for m, v, e in zip(metrics, values, event_ms, strict=True)
        if e == newest  # the metrics of the newest reading(s)
    )
    st["last_values"] = vals
    top = int(max(seqs))
    st["max_seq"] = top if st["max_seq"] is None else max(int(st["max_seq"]), top)


def _lookback(members: list[Member] | None) -> int:
    """Values to keep per metric: the longest lookback among the device's detectors (the
    default without one)."""
    return max((m.lookback for m, _ in members or ()), default=0) or LOOKBACK


def _slide(recent: dict[str, list[float]], in_order: Rows, keep: int) -> None:
    """Append the in-order readings' values per metric, keeping the last ``keep`` of each."""
    metrics, values = in_order["metric"].tolist(), in_order["value"].tolist()
    grown: dict[str, list[float]] = {}
    for metric, value in zip(metrics, values, strict=True):
        grown.setdefault(metric, list(recent.get(metric, ()))).append(float(value))
    for metric, vals in grown.items():
        recent[metric] = vals[-keep:] if keep > 0 else []


def _sessions(
    device_id: str, st: DeviceScoringState, in_order: Rows, policy: Policy, out: Output
) -> None:
    """Walk the in-order readings (one per distinct reading) through the session rules."""
    session = st["session"]
    last_ms, last_dev, max_seq = st["last_seen_ms"], st["last_device_ms"], st["max_seq"]
    walked: set[tuple[int, int]] = set()
    for seq, event_ms, dev_ms in zip(
        in_order["seq"].tolist(),
        in_order["event_ms"].tolist(),
        in_order["device_event_ms"].tolist(),
        strict=True,
    ):
        if (seq, dev_ms) in walked:
            continue
        walked.add((seq, dev_ms))
        reason = None
        if (
            session is not None
            and last_ms is not None
            and event_ms - last_ms > policy.session_gap_ms
        ):
            reason = "gap"
        elif (
            session is not None
            and max_seq is not None
            and last_dev is not None
            and seq < max_seq
            and dev_ms > last_dev
        ):
            reason = "reboot"
        if reason is not None and session is not None:
            out.add(Role.SESSIONS, dict(session, end_reason=reason))
            session = None
            max_seq = None
        if session is None:
            session = {
                "session_id": session_id(device_id, int(event_ms)),
                "device_id": device_id,
                "start_ms": int(event_ms),
                "end_ms": int(event_ms),
                "readings": 0,
                "first_seq": int(seq),
                "last_seq": int(seq),
                "end_reason": None,
            }
        session["end_ms"] = int(event_ms)
        session["readings"] += 1
        session["last_seq"] = int(seq)
        last_ms, last_dev = event_ms, dev_ms
        max_seq = seq if max_seq is None else max(max_seq, seq)
    assert session is not None  # in_order has a reading
    if st["session"] is None or session["session_id"] != st["session"]["session_id"]:
        st["published_signature"] = None  # a new session: publish it with the state
    st["session"] = session
    st["max_seq"] = max_seq


def _write_late(device_id: str, rows: Rows, watermark_ms: int, out: Output) -> None:
    readings: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(
        zip(rows["seq"].tolist(), rows["device_event_ms"].tolist(), strict=True)
    ):
        readings.setdefault(key, []).append(i)
    for (seq, dev_ms), index in sorted(readings.items()):
        first = index[0]
        record: dict[str, Any] = {
            "v": 1,
            "device_id": device_id,
            "seq": seq,
            "event_ms": int(rows["event_ms"][first]),
            "device_event_ms": dev_ms,
            "device_sent_ms": int(rows["device_sent_ms"][first]),
            "received_ms": int(rows["received_ms"][first]),
            "clock_offset_ms": int(rows["clock_offset_ms"][first]),
            "metrics": {str(rows["metric"][i]): float(rows["value"][i]) for i in index},
        }
        for optional in ("firmware", "status"):
            value = rows[optional][first]
            if value is not None and value == value:
                record[optional] = str(value)
        out.late += 1
        out.add(
            Role.LATE,
            {
                "reason": "behind the watermark",
                "watermark_ms": watermark_ms,
                "late_by_ms": watermark_ms - record["event_ms"],
                "record": record,
            },
        )
