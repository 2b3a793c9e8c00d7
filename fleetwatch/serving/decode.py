"""Kafka record values → contract objects. Anything that does not follow its contract raises
``ValueError`` with the reason; callers log it and skip the record."""

from __future__ import annotations

from typing import Any

from fleetwatch.contracts import deadletter, model_params, wire
from fleetwatch.contracts.alerts import Alert
from fleetwatch.contracts.commands import CommandAck
from fleetwatch.contracts.devices import DeviceSession, DeviceState
from fleetwatch.contracts.errors import ParamsRecordError
from fleetwatch.contracts.telemetry import TelemetryRecord
from fleetwatch.serving.store.ingest import AckRecord, ModelRecord, RateLimited


def _object(value: bytes | None) -> dict[str, Any]:
    if not value:
        raise ValueError("empty record (a tombstone or nothing)")
    body = wire.loads(value)
    if not isinstance(body, dict):
        raise ValueError(f"not a JSON object but {type(body).__name__}")
    return body


def tombstone_key(key: bytes | None, value: bytes | None) -> str | None:
    """The key of a tombstone (a record with a key and no value: the key's record is gone
    from a compacted topic), or ``None`` for any other record."""
    if value is not None or not key:
        return None
    return key.decode(errors="replace")


def rate_limited(
    key: bytes | None, headers: Any, timestamp_ms: int, partition: int, offset: int
) -> RateLimited | None:
    """A dead letter of a message the gateway refused for its device's rate (``fw.kind``
    ``rate_limited``; the device is the key, the time the record's), or ``None`` for any other
    dead letter. Never raises: whatever a dead letter holds, it is not dead-lettered again."""
    pairs = headers.items() if isinstance(headers, dict) else headers or ()
    kinds = [v for k, v in pairs if k == deadletter.KIND]
    if kinds != [deadletter.RATE_LIMITED.encode()] or not key or timestamp_ms <= 0:
        return None
    return RateLimited(key.decode(errors="replace")[:128], timestamp_ms, partition, offset)


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


def decode_model(key: bytes | None, value: bytes | None) -> ModelRecord:
    """A device's ``model.params`` record (:mod:`fleetwatch.contracts.model_params`); the device
    is the value's ``device_id`` (or the record key)."""
    try:
        record = model_params.decode(value, key)
    except ParamsRecordError as exc:
        raise ValueError(str(exc)) from exc
    if "scope" in record:
        raise ValueError(f"the fleet champion of {record['scope']}, not a device's record")
    return ModelRecord(
        device_id=record["device_id"][:128],
        kind=record["kind"][:64],
        version=record["version"],
        trained_from_ms=record["trained_from_ms"],
        trained_to_ms=record["trained_to_ms"],
        published_ms=record["published_ms"],
        params=record["params"],
    )
