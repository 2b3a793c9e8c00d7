"""The ``model.params`` record: how it is written and how it is read, side by side.

``model.params`` is compacted, one record per key. Two kinds of record share it:

- a device's parameters, key = device id, written by the trainer (:func:`encode_device`)::

    {"device_id", "kind", "schema", "version", "trained_from_ms", "trained_to_ms",
     "params": <the detector's to_params()>, "published_ms"}

  the header fields (:data:`HEADER`) repeat those of ``params``;
- a scope's fleet champion, key = ``fleet:{scope}`` (:mod:`fleetwatch.contracts.fleet`),
  written by ``fleetwatch models promote`` and ``rollback`` (:func:`encode_champion`)::

    {"scope", "model", "model_version", "kind", "schema", "version", "params",
     "published_ms"}

  ``version`` rises by one per record of the key (a rollback publishes an older
  ``model_version`` under a newer ``version``).

Values are canonical JSON (sorted keys, no NaN, no spaces). :func:`decode` reads either kind
into a typed record, or raises :class:`~fleetwatch.contracts.errors.ParamsRecordError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypedDict, cast, final

from fleetwatch.contracts import wire
from fleetwatch.contracts.errors import ParamsRecordError
from fleetwatch.contracts.fleet import fleet_key, fleet_scope

HEADER = ("kind", "schema", "version", "trained_from_ms", "trained_to_ms")
"""The parameter fields a device's record repeats at its top level."""


@final
class DeviceParamsRecord(TypedDict):
    device_id: str
    kind: str
    schema: int
    version: int
    trained_from_ms: int | None
    trained_to_ms: int | None
    params: dict[str, Any]
    published_ms: int


@final
class ChampionRecord(TypedDict):
    scope: str
    model: str
    """The registered model's name (``{mlflow.model_prefix}-{scope}``)."""
    model_version: int
    kind: str
    schema: int
    version: int
    params: dict[str, Any]
    published_ms: int


ParamsRecord = DeviceParamsRecord | ChampionRecord


def _canonical(record: Mapping[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, allow_nan=False, separators=(",", ":"))


def encode_device(
    device_id: str, params_json: str, published_ms: int, header: Mapping[str, Any] | None = None
) -> str:
    """The value of a device's record: its parameters (JSON text) with their header lifted out.

    With ``header`` (the :data:`HEADER` fields of ``params_json``, which must then be canonical
    text, as ``fleetwatch.models.params.dumps`` writes it), the parameters are embedded as they
    are, not parsed and written again; the bytes are the same.
    """
    if header is None:
        p = json.loads(params_json)
        if not isinstance(p, dict):
            raise ParamsRecordError(f"parameters must be a JSON object, got {type(p).__name__}")
        record: dict[str, Any] = {name: p[name] for name in HEADER}
        record |= {"device_id": device_id, "params": p, "published_ms": published_ms}
        return _canonical(record)
    fields = {name: header[name] for name in HEADER}
    fields |= {"device_id": device_id, "published_ms": published_ms}
    head = _canonical(fields)
    # "params" sorts between "kind" and "published_ms"
    cut = head.rindex(',"published_ms":')
    return f'{head[:cut]},"params":{params_json}{head[cut:]}'


def encode_champion(
    scope: str,
    model: str,
    model_version: int,
    params: Mapping[str, Any],
    version: int,
    published_ms: int,
) -> str:
    """The value of the ``fleet:{scope}`` record of a scope's champion."""
    record: ChampionRecord = {
        "scope": scope,
        "model": model,
        "model_version": model_version,
        "kind": params["kind"],
        "schema": params["schema"],
        "version": version,
        "params": dict(params),
        "published_ms": published_ms,
    }
    return _canonical(record)


def key_of(record: ParamsRecord) -> str:
    """The record key a record belongs under: the device id, or ``fleet:{scope}``."""
    if "scope" in record:
        return fleet_key(record["scope"])
    return record["device_id"]


def decode(value: str | bytes | None, key: str | bytes | None = None) -> ParamsRecord:
    """A record value as the typed record of its kind: a champion's when the ``key`` is
    ``fleet:{scope}`` (or, without a key, when the value has a ``scope``), else a device's
    (its ``device_id``, else the key). Raises :class:`ParamsRecordError` saying what is wrong.
    """
    if not value:
        raise ParamsRecordError("empty record (a tombstone or nothing)")
    try:
        body = wire.loads(value)
    except wire.RecordRejected as exc:
        raise ParamsRecordError(str(exc)) from exc
    if not isinstance(body, dict):
        raise ParamsRecordError(f"not a JSON object but {type(body).__name__}")
    if isinstance(key, bytes):
        key = key.decode(errors="replace")
    champion = "scope" in body if key is None else fleet_scope(key) is not None
    if not isinstance(body.get("params"), dict):
        raise ParamsRecordError("no 'params' object")
    _text(body, "kind")
    for name in ("schema", "version", "published_ms"):
        _integer(body, name)
    if champion:
        _text(body, "scope")
        _text(body, "model")
        _integer(body, "model_version")
        return cast(ChampionRecord, body)
    if not body.get("device_id") and key:
        body["device_id"] = key
    _text(body, "device_id")
    for name in ("trained_from_ms", "trained_to_ms"):
        if name not in body:
            raise ParamsRecordError(f"no {name}")
        if body[name] is not None:
            _integer(body, name)
    return cast(DeviceParamsRecord, body)


def _text(body: dict[str, Any], name: str) -> None:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise ParamsRecordError(f"{name} must be a non-empty string, got {value!r}")


def _integer(body: dict[str, Any], name: str) -> None:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamsRecordError(f"{name} must be an integer, got {value!r}")
