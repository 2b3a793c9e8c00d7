"""The telemetry wire contract, version 1.

A device publishes to ``{root}/{device_id}/telemetry`` (MQTT, QoS 0 or 1) a JSON object::

    {"v": 1, "seq": 17, "ts": 1763750000000, "sent": 1763750000005,
     "metrics": {"temperature": 21.3}, "firmware": "1.4.2", "status": "ok"}

``v`` schema version, ``seq`` per-device sequence number (0 to 2^63 - 1: a signed 64-bit
integer, as every stage stores it), ``ts`` event time and ``sent`` send time in epoch
milliseconds of the device clock, ``metrics`` one or more (at most 64) named finite numbers of
magnitude at most :data:`~fleetwatch.contracts.limits.VALUE_LIMIT`; ``firmware`` and
``status`` (at most 64 characters, no NUL) and ``device_id`` (must match the topic) optional.
Unknown fields are refused in v1. A payload may also be a JSON array of such readings (a batch).

The gateway appends to ``telemetry.raw`` (key = device id, record timestamp = ``event_ms``)
a :class:`TelemetryRecord`: the reading plus the device id and the gateway receive time.

The pydantic models are the contract and word its errors. The gateway checks each reading on
a compiled path first (:func:`decode_readings`, msgspec, the same rules as
:class:`Reading` from the same constants) and falls back to the model for the reason of a
payload it refuses; it writes records with :func:`encode_record`, byte for byte what
``TelemetryRecord.model_dump_json(exclude_none=True)`` gives.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import msgspec
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fleetwatch.contracts.errors import PayloadError
from fleetwatch.contracts.identifiers import (
    DEVICE_ID_PATTERN,
    METRIC_NAME_PATTERN,
    DeviceId,
    MetricName,
)
from fleetwatch.contracts.limits import INT64_MAX, LABEL_LENGTH, VALUE_LIMIT

SCHEMA_VERSION = 1

DEVICE_METRICS = 64
"""Metric names a device may have, by default (``score.max_metrics``): the scorer refuses a
reading's names beyond them, and the trainer does not learn them."""

READING_METRICS = 64
"""The most metrics one reading carries."""

EpochMs = Annotated[int, Field(ge=0, lt=10**14)]
Seq = Annotated[int, Field(ge=0, le=INT64_MAX)]
MetricValue = Annotated[float, Field(ge=-VALUE_LIMIT, le=VALUE_LIMIT)]
LABEL_PATTERN = r"^[^\x00]*$"
Label = Annotated[str, StringConstraints(max_length=LABEL_LENGTH, pattern=LABEL_PATTERN)]


class Reading(BaseModel):
    """What a device sends (wire v1)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    v: Annotated[int, Field(ge=1, le=SCHEMA_VERSION)]
    seq: Seq
    ts: EpochMs
    sent: EpochMs
    metrics: Annotated[
        dict[MetricName, MetricValue], Field(min_length=1, max_length=READING_METRICS)
    ]
    firmware: Label | None = None
    status: Label | None = None
    device_id: DeviceId | None = None
    """Optional; when present it must match the device id of the topic."""


class TelemetryRecord(BaseModel):
    """A reading as the gateway appends it to ``telemetry.raw``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    v: int = SCHEMA_VERSION
    device_id: DeviceId
    seq: Seq
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


RECORD_FIELDS: dict[str, Any] = {
    name: field.annotation for name, field in TelemetryRecord.model_fields.items()
}
"""The fields of a ``telemetry.raw`` record and their types (``X | None`` where it may be
null), in order: the one field list the readers follow — the scorer's and the trainer's parser
(:mod:`fleetwatch.contracts.raw_records`, :mod:`fleetwatch.streaming.scorer.readings`, checked
against it by the unit tests)."""


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


def _whole(pattern: str) -> str:
    """``pattern`` for Python's ``re.search`` as pydantic's regex engine reads it: its ``$``
    is the end of the text, where Python's also matches before a final newline."""
    return pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern


_EpochMs = Annotated[int, msgspec.Meta(ge=0, lt=10**14)]
_MetricValue = Annotated[float, msgspec.Meta(ge=-VALUE_LIMIT, le=VALUE_LIMIT)]
_Label = Annotated[str, msgspec.Meta(max_length=LABEL_LENGTH, pattern=_whole(LABEL_PATTERN))]
_DeviceId = Annotated[str, msgspec.Meta(pattern=_whole(DEVICE_ID_PATTERN))]


class CompiledReading(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """:class:`Reading` compiled: the same fields, order and rules (msgspec's JSON decoder is
    strict as the model is: no float for an int, no bool for a number, no NaN or infinity).
    It accepts only what :class:`Reading` accepts, with the same values; the unit tests hold
    it to that. What it refuses, :class:`Reading` says why."""

    v: Annotated[int, msgspec.Meta(ge=1, le=SCHEMA_VERSION)]
    seq: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
    ts: _EpochMs
    sent: _EpochMs
    metrics: Annotated[
        dict[str, _MetricValue], msgspec.Meta(min_length=1, max_length=READING_METRICS)
    ]
    """Its names are held to :data:`METRIC_NAME_PATTERN` by :func:`decode_readings`."""
    firmware: _Label | None = None
    status: _Label | None = None
    device_id: _DeviceId | None = None


_READINGS = msgspec.json.Decoder(CompiledReading | list[CompiledReading])
_METRIC_NAME = re.compile(_whole(METRIC_NAME_PATTERN))
_NAMES_KNOWN = 4_096
"""Metric names remembered as checked: a fleet sends a few dozen, and a device that invents
names cannot grow the set past this (its names are then checked each time)."""
_checked_names: set[str] = set()


def decode_readings(payload: bytes | bytearray) -> CompiledReading | list[CompiledReading] | None:
    """A payload of one reading or a batch of them, decoded and checked in one pass; ``None``
    when it is anything else (broken JSON, a reading :class:`Reading` refuses, or something
    this path leaves to :class:`Reading`, such as a byte-order mark): the model says why.
    Metric names are checked against their pattern once per name, not once per reading."""
    try:
        decoded = _READINGS.decode(payload)
    except msgspec.MsgspecError:
        return None
    if isinstance(decoded, list):
        return decoded if all(_named_well(r.metrics) for r in decoded) else None
    return decoded if _named_well(decoded.metrics) else None


def _named_well(metrics: dict[str, float]) -> bool:
    for name in metrics:
        if name not in _checked_names:
            if _METRIC_NAME.search(name) is None:
                return False
            if len(_checked_names) < _NAMES_KNOWN:
                _checked_names.add(name)
    return True


class _Record(msgspec.Struct, omit_defaults=True):
    """:class:`TelemetryRecord` as it goes on the wire: its fields in its order, ``None``
    left out."""

    v: int
    device_id: str
    seq: int
    event_ms: int
    device_event_ms: int
    device_sent_ms: int
    received_ms: int
    clock_offset_ms: int
    metrics: dict[str, float]
    firmware: str | None = None
    status: str | None = None


_encode_record = msgspec.json.Encoder().encode


def encode_record(
    device_id: str,
    seq: int,
    event_ms: int,
    device_event_ms: int,
    device_sent_ms: int,
    received_ms: int,
    clock_offset_ms: int,
    metrics: dict[str, float],
    firmware: str | None = None,
    status: str | None = None,
) -> bytes:
    """The ``telemetry.raw`` value of a reading already checked (against :class:`Reading`,
    its device id against the topic's): the bytes :func:`encode` gives for the same
    :class:`TelemetryRecord`, without building and checking one."""
    return _encode_record(
        _Record(
            SCHEMA_VERSION,
            device_id,
            seq,
            event_ms,
            device_event_ms,
            device_sent_ms,
            received_ms,
            clock_offset_ms,
            metrics,
            firmware,
            status,
        )
    )


def encode(record: TelemetryRecord) -> bytes:
    return record.model_dump_json(exclude_none=True).encode()


def reading_payload(seq: int, ts: int, sent: int, metrics: dict[str, float], **extra: Any) -> bytes:
    """The wire bytes of one reading (used by the simulator and tests)."""
    body: dict[str, Any] = {"v": SCHEMA_VERSION, "seq": seq, "ts": ts, "sent": sent}
    body["metrics"] = metrics
    body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()
