"""A device's sessions: a run of its readings with no gap of ``score.session_gap_s`` in event
time and no reboot (the sequence number going back while the device clock goes forward). The
open session is in the device's state and goes out on ``device.sessions`` with each state
record; a session that ends goes out with its reason (``gap`` or ``reboot``)."""

from __future__ import annotations

from fleetwatch.contracts.devices import session_id
from fleetwatch.streaming.scorer.device_state import DeviceScoringState
from fleetwatch.streaming.scorer.output import Output, Role
from fleetwatch.streaming.scorer.readings import Rows


def follow(
    device_id: str, st: DeviceScoringState, in_order: Rows | None, gap_ms: int, out: Output
) -> None:
    """Walk the in-order readings (``None``: none; one per distinct reading) through the
    session rules: the sessions they end go to ``out``, the one open after them into the
    state."""
    if in_order is None or not len(in_order):
        return
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
        if session is not None and last_ms is not None and event_ms - last_ms > gap_ms:
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


def end(st: DeviceScoringState, reason: str, out: Output) -> None:
    """End the device's open session, if any, for ``reason``."""
    if st["session"] is not None:
        out.add(Role.SESSIONS, dict(st["session"], end_reason=reason))
        st["session"] = None
