"""The telemetry wire contract, version 1.

A device publishes to ``{root}/{device_id}/telemetry`` (MQTT, QoS 0 or 1) a JSON object::

    {"v": 1, "seq": 17, "ts": 1763750000000, "sent": 1763750000005,
     "metrics": {"temperature": 21.3}, "firmware": "1.4.2", "status": "ok"}

``v`` schema version, ``seq`` per-device sequence number, ``ts`` event time and ``sent``
send time in epoch milliseconds of the device clock, ``metrics`` one or more (at most 64) named
finite numbers; ``firmware``, ``status`` and ``device_id`` (must match the topic) optional.
Unknown fields are refused in v1. A payload may also be a JSON array of such readings (a batch).

The gateway appends to ``telemetry.raw`` (key = device id, record timestamp = ``event_ms``)
a :class:`TelemetryRecord`: the reading plus the device id and the gateway receive time.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fleetwatch.contracts.errors import PayloadError

SCHEMA_VERSION = 1

DeviceId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]
MetricName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")]
EpochMs = Annotated[int, Field(ge=0, lt=10**14)]


class Reading(BaseModel):
    """What a device sends (wire v1)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    v: Annotated[int, Field(ge=1, le=SCHEMA_VERSION)]
    seq: Annotated[int, Field(ge=0)]
    ts: EpochMs
    sent: EpochMs
    metrics: Annotated[dict[MetricName, float], Field(min_length=1, max_length=64)]
    firmware: Annotated[str, StringConstraints(max_length=64)] | None = None
    status: Annotated[str, StringConstraints(max_length=64)] | None = None
    device_id: DeviceId | None = None
    """Optional; when present it must match the device id of the topic."""


class TelemetryRecord(BaseModel):
    """A reading as the gateway appends it to ``telemetry.raw``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    v: int = SCHEMA_VERSION
    device_id: DeviceId
    seq: int
    event_ms: int
    """Event time corrected for the device's estimated clock offset."""
    device_event_ms: int
    device_sent_ms: int
    received_ms: int
    clock_offset_ms: int = 0
    """The gateway's estimate of (gateway clock - device clock) used for ``event_ms``."""
    metrics: dict[str, float]
    firmware: str | None = None
    status: str | None = None


def parse_reading(payload: bytes | bytearray) -> Reading:
    """Parse and check one wire payload; raise :class:`PayloadError` naming the broken rule."""
    try:
        return Reading.model_validate_json(payload)
    except ValidationError as exc:
        raise PayloadError(first_problem(exc)) from exc


def first_problem(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err["loc"]) or "payload"
    return f"{where}: {err['msg']}"


def encode(record: TelemetryRecord) -> bytes:
    return record.model_dump_json(exclude_none=True).encode()


def reading_payload(seq: int, ts: int, sent: int, metrics: dict[str, float], **extra: Any) -> bytes:
    """The wire bytes of one reading (used by the simulator and tests)."""
    body: dict[str, Any] = {"v": SCHEMA_VERSION, "seq": seq, "ts": ts, "sent": sent}
    body["metrics"] = metrics
    body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()
