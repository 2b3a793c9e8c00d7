"""Per-device records the scorer publishes.

``device.state`` (compacted, key = device id): the latest state of each device.
``device.sessions`` (compacted, key = session id): a device's activity sessions in event time;
a session ends after a gap with no readings (``score.session_gap_s``) or at a reboot (the
device's sequence number going back). The record of an open session is re-published as it
grows; the closing record has ``end_reason`` set.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict

DeviceStatus = Literal["ok", "alerting", "silent", "quarantined"]
SessionEnd = Literal["gap", "reboot"]


class WindowFeatures(BaseModel):
    """One metric over one closed event-time window ``[start_ms, end_ms)``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    start_ms: int
    end_ms: int
    count: int
    mean: float
    std: float
    min: float
    max: float


class DeviceCondition(BaseModel):
    """What a device's state record says of the device: its status, its newest reading, its open
    alerts, parameters and session, and its quarantine. The API keeps and shows this part of
    each record (``serving/schemas/devices.py``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    status: DeviceStatus
    last_seen_ms: int
    """Event time of the latest reading (clock-corrected by the gateway)."""
    last_received_ms: int
    last_seq: int
    last_values: dict[str, float]
    open_alerts: list[str]
    """``alert_id`` of every open episode."""
    params_version: int
    clock_offset_ms: int
    session_id: str | None = None
    quarantined_until_ms: int | None = None
    """While ``status`` is ``quarantined``: when the quarantine ends (wall clock), unless lifted
    (``POST /devices/{id}/quarantine/lift`` ends it sooner)."""
    quarantine_reason: str | None = None
    """Why the device's last scoring batch failed."""
    updated_ms: int


class DeviceState(DeviceCondition):
    """A ``device.state`` record: the device's condition, and what the scorer counted and
    windowed of its readings."""

    device_id: str
    firmware: str | None = None
    late_readings: int = 0
    """Readings of this device that arrived behind the watermark so far (on
    ``telemetry.late``)."""
    duplicate_readings: int = 0
    """Repeated readings dropped so far."""
    windows: dict[str, WindowFeatures] = {}
    """Per metric, its newest window final under the watermark (``score.window_size_s``)."""


class DeviceSession(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    session_id: str
    device_id: str
    start_ms: int
    end_ms: int
    """Event time of the latest reading in the session (the last one, once it ended)."""
    readings: int
    first_seq: int
    last_seq: int
    end_reason: SessionEnd | None = None
    """``None`` while the session is open."""


def session_id(device_id: str, start_ms: int) -> str:
    key = f"{device_id}\x1f{start_ms}"
    return hashlib.blake2b(key.encode(), digest_size=10).hexdigest()
