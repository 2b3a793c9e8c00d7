"""Kafka record values → contract objects. Anything that does not follow its contract raises
``ValueError`` with the reason; callers log it and skip the record."""

from __future__ import annotations

import json
from typing import Any

from fleetwatch.contracts.alerts import Alert
from fleetwatch.contracts.commands import CommandAck
from fleetwatch.contracts.devices import DeviceSession, DeviceState
from fleetwatch.contracts.telemetry import TelemetryRecord
from fleetwatch.serving.store.ingest import AckRecord, ModelRecord


def _object(value: bytes | None) -> dict[str, Any]:
    if not value:
        raise ValueError("empty record (a tombstone or nothing)")
    try:
        body = json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ValueError(f"not a JSON object but {type(body).__name__}")
    return body


def decode_alert(value: bytes | None) -> Alert:
    return Alert.model_validate(_object(value))


def decode_state(value: bytes | None) -> DeviceState:
    return DeviceState.model_validate(_object(value))


def decode_session(value: bytes | None) -> DeviceSession:
    return DeviceSession.model_validate(_object(value))


def decode_ack(value: bytes | None) -> AckRecord:
    """The gateway's record: a device's :class:`CommandAck` plus the ``device_id`` of the MQTT
    topic it came on and the gateway's ``received_ms``."""
    body = _object(value)
    device_id = body.pop("device_id", None)
    body.pop("received_ms", None)
    if device_id is not None and not isinstance(device_id, str):
        raise ValueError(f"device_id must be a string, got {device_id!r}")
    return AckRecord(CommandAck.model_validate(body), device_id)


def decode_reading(value: bytes | None) -> TelemetryRecord:
    return TelemetryRecord.model_validate(_object(value))


def _int_or_none(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer or null, got {value!r}")
    return value


def decode_model(key: bytes | None, value: bytes | None) -> ModelRecord:
    """A ``model.params`` record: the value carries ``kind``, ``version``, the trained range and
    the parameters; the device is the record key (or the value's ``device_id``)."""
    body = _object(value)
    device_id = body.get("device_id") or (key.decode(errors="replace") if key else None)
    if not isinstance(device_id, str) or not device_id:
        raise ValueError("no device id (neither a record key nor device_id)")
    kind, version = body.get("kind"), body.get("version")
    if not isinstance(kind, str) or not kind:
        raise ValueError("kind must be a non-empty string")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"version must be an integer, got {version!r}")
    params = body.get("params")
    return ModelRecord(
        device_id=device_id[:128],
        kind=kind[:64],
        version=version,
        trained_from_ms=_int_or_none(body, "trained_from_ms"),
        trained_to_ms=_int_or_none(body, "trained_to_ms"),
        published_ms=_int_or_none(body, "published_ms"),
        params=params if isinstance(params, dict) else body,
    )
