"""A device's event-time timer: at ``last seen + session gap`` a device that sent nothing since
falls silent — its session ends, its open alerts resolve and its status becomes ``silent`` — and
at ``last seen + expire_after`` a silent device is forgotten: it leaves the scorer's state and,
with a tombstone each, ``device.state`` and ``device.sessions``, and a reading after that
starts it afresh. A device the scorer holds state for but has never seen
a reading of (every reading late, its batches failed, or parameters alone) is forgotten at
``expire_after`` past the watermark at which that state came: no state stays for ever."""

from __future__ import annotations

from fleetwatch.streaming.scorer import sessions
from fleetwatch.streaming.scorer.device_state import DeviceScoringState, state_record
from fleetwatch.streaming.scorer.episodes import resume
from fleetwatch.streaming.scorer.output import Output, Role
from fleetwatch.streaming.scorer.policy import Policy


def expire(
    device_id: str, state: DeviceScoringState, watermark_ms: int, now_ms: int, policy: Policy
) -> tuple[DeviceScoringState, Output, int | None]:
    """The device's timer fired (the watermark passed ``last seen + session gap``, or, once it
    is silent, ``last seen + expire_after``). Returns the new state, the output and the next
    timer to register (``None``: none; for a silent device, it is due to be forgotten:
    :func:`forgotten`, and the output has its tombstones)."""
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
        # what the device's compacted topics hold of it goes with it: its state under its id;
        # on device.sessions (keyed by session) the tombstone under its id tells every reader
        # that the device's sessions went, and the topic's retention deletes their records
        out.forget(Role.STATE, Role.SESSIONS)
        return st, out, None
    due = int(last_ms) + policy.session_gap_ms
    if due > watermark_ms:
        st["timer_ms"] = due
        return st, out, due
    sessions.end(st, "gap", out)
    lifecycle = resume(device_id, st, now_ms, policy.min_readings, policy.clear_readings)
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
    if last_ms is None:
        return True  # never seen a reading of: its one timer, expire_after on, has fired
    return state["status"] == "silent" and int(last_ms) + policy.expire_after_ms <= watermark_ms


def wants_timer(
    state: DeviceScoringState, policy: Policy, watermark_ms: int | None = None
) -> int | None:
    """A timer to register after a batch of the device's records (none while an earlier one
    is pending: it re-arms; a silent device's expiry timer gives way to the session gap's).
    A device never seen a reading of gets ``expire_after`` past ``watermark_ms`` (none before
    the query has a watermark)."""
    if state["last_seen_ms"] is None:
        if not watermark_ms or state["timer_ms"] is not None:
            return None
        gone = watermark_ms + policy.expire_after_ms
        state["timer_ms"] = gone
        return gone
    due = int(state["last_seen_ms"]) + policy.session_gap_ms
    pending = state["timer_ms"]
    if pending is not None and int(pending) <= due:
        return None
    state["timer_ms"] = due
    return due
