"""Readings behind the watermark: a device's readings whose event time the watermark has passed
are not scored — every window and alert decision that could take them is final — but written
to ``telemetry.late`` with the watermark they missed, and counted.

They were sent, though: a device whose buffered readings arrive late (back from offline) did not
drop out. Their event times fill the gap of a dropout episode (withdrawn once no gap over its
limit is left), and the newest of them is where the next dropout gap is measured from
(``late_heard_ms``).
"""

from __future__ import annotations

from typing import Any

from fleetwatch.streaming.scorer.device_state import DeviceScoringState
from fleetwatch.streaming.scorer.episodes import DROPOUT, resume
from fleetwatch.streaming.scorer.output import Output, Role
from fleetwatch.streaming.scorer.policy import Policy
from fleetwatch.streaming.scorer.readings import Rows


def set_aside(
    device_id: str,
    st: DeviceScoringState,
    late: Rows | None,
    watermark_ms: int,
    now_ms: int,
    policy: Policy,
    out: Output,
) -> list[dict[str, Any]]:
    """Write the ``late`` readings (``None``: none) to ``telemetry.late``, count them, and let
    them fill the device's dropout gaps; the alert events of the dropouts they withdraw."""
    events: list[dict[str, Any]] = []
    if late is not None:
        _write(device_id, late, watermark_ms, out)
        events = _heard(device_id, st, late, now_ms, policy)
    st["late_readings"] = int(st["late_readings"]) + out.late
    return events


def _heard(
    device_id: str, st: DeviceScoringState, late: Rows, now_ms: int, policy: Policy
) -> list[dict[str, Any]]:
    newest = int(late["event_ms"].max())
    heard = st["late_heard_ms"]
    st["late_heard_ms"] = newest if heard is None else max(int(heard), newest)
    if not any(e["kind"] == DROPOUT for e in st["episodes"]):
        return []
    lifecycle = resume(device_id, st, now_ms, policy.min_readings, policy.clear_readings)
    lifecycle.late_readings(late["seq"], late["event_ms"], late["received_ms"])
    st["episodes"] = lifecycle.dump()
    return lifecycle.events


def _write(device_id: str, rows: Rows, watermark_ms: int, out: Output) -> None:
    """One ``telemetry.late`` record per reading, with the watermark it missed."""
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
