"""Turning one MQTT message into a ``telemetry.raw`` record or a dead letter: pure, no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetwatch.contracts.errors import PayloadError
from fleetwatch.contracts.telemetry import TelemetryRecord, encode, parse_reading
from fleetwatch.ingest.errors import PayloadRejected

_DEVICE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


@dataclass(frozen=True)
class Accepted:
    key: bytes
    value: bytes
    timestamp_ms: int


@dataclass(frozen=True)
class DeadLetter:
    key: bytes
    value: bytes
    headers: list[tuple[str, str | bytes | None]]
    reason: str


def device_from_topic(topic: str, root: str) -> str:
    prefix = root + "/"
    if not topic.startswith(prefix) or not topic.endswith("/telemetry"):
        raise PayloadRejected(f"topic {topic!r} is not {root}/{{device_id}}/telemetry")
    device_id = topic[len(prefix) : -len("/telemetry")]
    if not _DEVICE_ID.match(device_id):
        raise PayloadRejected(
            f"device id {device_id!r} in topic {topic!r} is not a valid device id"
        )
    return device_id


def accept(
    topic: str, payload: bytes | bytearray, received_ms: int, root: str, max_bytes: int
) -> Accepted:
    """Check one message; raise :class:`PayloadRejected` with a specific reason."""
    device_id = device_from_topic(topic, root)
    if len(payload) > max_bytes:
        raise PayloadRejected(f"payload of {len(payload)} bytes exceeds the {max_bytes}-byte limit")
    if not payload:
        raise PayloadRejected("empty payload")
    try:
        reading = parse_reading(payload)
    except PayloadError as exc:
        raise PayloadRejected(str(exc)) from exc
    record = TelemetryRecord(
        device_id=device_id,
        seq=reading.seq,
        event_ms=reading.ts,
        device_event_ms=reading.ts,
        device_sent_ms=reading.sent,
        received_ms=received_ms,
        metrics=reading.metrics,
        firmware=reading.firmware,
        status=reading.status,
    )
    return Accepted(device_id.encode(), encode(record), reading.ts)


def dead_letter(
    topic: str, payload: bytes | bytearray, received_ms: int, reason: str, root: str
) -> DeadLetter:
    """The raw bytes, kept whole, with the reason and the MQTT topic in headers."""
    try:
        key = device_from_topic(topic, root).encode()
    except PayloadRejected:
        key = b""
    headers: list[tuple[str, str | bytes | None]] = [
        ("fw.reason", reason.encode()),
        ("fw.mqtt_topic", topic.encode(errors="replace")),
        ("fw.received_ms", str(received_ms).encode()),
    ]
    return DeadLetter(key, bytes(payload), headers, reason)
