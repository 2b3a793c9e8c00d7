"""The ``model.params`` record, written and read in one place: the bytes of both kinds of
record, a record read back as what was written, and a malformed record refused by name."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleetwatch.contracts.errors import ParamsRecordError, PayloadError
from fleetwatch.contracts.fleet import fleet_key
from fleetwatch.contracts.model_params import (
    HEADER,
    decode,
    encode_champion,
    encode_device,
    key_of,
)
from fleetwatch.models import params

PARAMS: dict[str, Any] = {
    "kind": "seasonal",
    "schema": 1,
    "version": 3,
    "trained_from_ms": 10,
    "trained_to_ms": 20,
    "hyper": {"period_s": 86400},
    "state": {"mean": [1.5]},
}
TEXT = params.dumps(PARAMS)
DEVICE_BYTES = (
    '{"device_id":"d1","kind":"seasonal","params":' + TEXT + ',"published_ms":99,'
    '"schema":1,"trained_from_ms":10,"trained_to_ms":20,"version":3}'
)
CHAMPION_BYTES = (
    '{"kind":"seasonal","model":"fleetwatch-t","model_version":4,"params":' + TEXT + ","
    '"published_ms":99,"schema":1,"scope":"t","version":2}'
)


def test_a_device_record_has_the_bytes_it_always_had() -> None:
    assert encode_device("d1", TEXT, 99) == DEVICE_BYTES
    header = {name: PARAMS[name] for name in HEADER}
    assert encode_device("d1", TEXT, 99, header) == DEVICE_BYTES


def test_a_champion_record_has_the_bytes_it_always_had() -> None:
    assert encode_champion("t", "fleetwatch-t", 4, PARAMS, 2, 99) == CHAMPION_BYTES


def test_a_device_record_reads_back_as_written() -> None:
    record = decode(DEVICE_BYTES.encode(), b"d1")
    assert "device_id" in record
    assert record["device_id"] == "d1"
    assert (record["kind"], record["version"], record["published_ms"]) == ("seasonal", 3, 99)
    assert (record["trained_from_ms"], record["trained_to_ms"]) == (10, 20)
    assert record["params"] == PARAMS
    assert key_of(record) == "d1"
    assert decode(DEVICE_BYTES) == record


def test_a_champion_record_reads_back_as_written() -> None:
    record = decode(CHAMPION_BYTES, fleet_key("t"))
    assert "scope" in record
    assert (record["scope"], record["model"], record["model_version"]) == ("t", "fleetwatch-t", 4)
    assert (record["version"], record["params"]) == (2, PARAMS)
    assert key_of(record) == fleet_key("t")
    assert decode(CHAMPION_BYTES) == record  # without a key: by its scope


def test_the_key_names_the_device_when_the_value_does_not() -> None:
    body = json.loads(DEVICE_BYTES)
    del body["device_id"]
    record = decode(json.dumps(body), b"d9")
    assert key_of(record) == "d9"
    with pytest.raises(ParamsRecordError, match="device_id"):
        decode(json.dumps(body))


def _without(name: str) -> str:
    body = json.loads(DEVICE_BYTES)
    del body[name]
    return json.dumps(body)


def _with(**fields: Any) -> str:
    return json.dumps(json.loads(DEVICE_BYTES) | fields)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (None, "empty"),
        (b"", "empty"),
        (b"{broken", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (_without("params"), "params"),
        (_with(params=[1]), "params"),
        (_with(version="3"), "version"),
        (_with(version=True), "version"),
        (_with(kind=""), "kind"),
        (_with(published_ms=None), "published_ms"),
        (_with(trained_from_ms=1.5), "trained_from_ms"),
        (_without("trained_to_ms"), "trained_to_ms"),
        (_with(device_id=7), "device_id"),
    ],
)
def test_a_malformed_device_record_is_refused_by_name(value: Any, problem: str) -> None:
    with pytest.raises(ParamsRecordError, match=problem):
        decode(value)


@pytest.mark.parametrize(("name", "bad"), [("model", None), ("model_version", "4"), ("scope", 1)])
def test_a_malformed_champion_record_is_refused_by_name(name: str, bad: Any) -> None:
    value = json.dumps(json.loads(CHAMPION_BYTES) | {name: bad})
    with pytest.raises(ParamsRecordError, match=name):
        decode(value, fleet_key("t"))


def test_the_error_is_a_payload_error() -> None:
    assert issubclass(ParamsRecordError, PayloadError)
