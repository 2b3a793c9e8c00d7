"""One rule for a device id and a metric name, followed by the gateway, the wire contracts and
the API; a device id never holds ``:``, so the ``fleet:{scope}`` keys are never a device's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import StringConstraints, ValidationError

from fleetwatch.contracts import identifiers
from fleetwatch.contracts.fleet import fleet_key
from fleetwatch.contracts.identifiers import DEVICE_ID_PATTERN, FLEET_KEY_PREFIX, is_device_id
from fleetwatch.contracts.telemetry import Reading, TelemetryRecord
from fleetwatch.ingest import accept
from fleetwatch.ingest.accept import device_from_topic, handle
from fleetwatch.ingest.clock import ClockOffsets
from fleetwatch.ingest.errors import PayloadRejected
from fleetwatch.serving.schemas import common
from fleetwatch.serving.schemas.devices import DeviceCreate
from tests.unit.api_support import Api, running_api

NOW = 1_800_000_000_000
PAYLOAD = b'{"v":1,"seq":1,"ts":1800000000000,"sent":1800000000000,"metrics":{"t":1.5}}'


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from running_api(tmp_path)


def _pattern(field: Any) -> object:
    (constraint,) = [m for m in field.metadata if isinstance(m, StringConstraints)]
    return constraint.pattern


@pytest.mark.parametrize("device_id", ["d1", "pump-7", "site_a.fan-2", "0", "a" * 128])
def test_device_ids(device_id: str) -> None:
    assert is_device_id(device_id)


@pytest.mark.parametrize(
    "device_id", ["", "a:b", fleet_key("humidity"), "-a", "a b", "a/b", "a\n", "a" * 129]
)
def test_not_device_ids(device_id: str) -> None:
    assert not is_device_id(device_id)


def test_a_fleet_key_can_never_be_a_device_id() -> None:
    assert ":" in FLEET_KEY_PREFIX
    assert fleet_key("x").startswith(FLEET_KEY_PREFIX)
    assert not is_device_id(fleet_key("x"))


def test_the_gateway_refuses_a_colon_in_the_device_id_of_a_topic() -> None:
    with pytest.raises(PayloadRejected, match="not a valid device id"):
        device_from_topic("devices/fleet:humidity/telemetry", "devices")
    out = handle("devices/a:b/telemetry", PAYLOAD, NOW, "devices", 4096, ClockOffsets())
    assert out.accepted == []
    (dead,) = out.rejected
    assert "not a valid device id" in dead.reason
    assert handle("devices/a.b/telemetry", PAYLOAD, NOW, "devices", 4096, ClockOffsets()).accepted


def test_the_api_schema_refuses_a_colon_in_a_device_id() -> None:
    with pytest.raises(ValidationError, match="device_id"):
        DeviceCreate.model_validate({"device_id": "a:b"})
    assert DeviceCreate.model_validate({"device_id": "a.b"}).device_id == "a.b"


def test_the_api_refuses_a_colon_in_a_device_id(api: Api) -> None:
    assert api.post("/devices", json={"device_id": "fleet:x"}).status_code == 422
    assert api.get("/devices/fleet:x").status_code == 422
    assert api.post("/devices", json={"device_id": "pump-1"}).status_code == 201


def test_the_wire_contract_refuses_a_colon_in_a_device_id() -> None:
    with pytest.raises(ValidationError, match="device_id"):
        Reading.model_validate(
            {"v": 1, "seq": 1, "ts": 1, "sent": 1, "metrics": {"t": 1.0}, "device_id": "a:b"}
        )


def test_gateway_api_and_contracts_hold_the_same_rule() -> None:
    assert vars(accept)["is_device_id"] is identifiers.is_device_id
    assert common.DEVICE_ID_PATTERN is DEVICE_ID_PATTERN
    assert _pattern(DeviceCreate.model_fields["device_id"]) is DEVICE_ID_PATTERN
    assert _pattern(TelemetryRecord.model_fields["device_id"]) is DEVICE_ID_PATTERN


@pytest.mark.parametrize("device_id", ["d1", "a:b", "a\n", "-a", "a.b_c-9", "", "é"])
def test_the_gateway_and_the_api_agree(device_id: str) -> None:
    try:
        device_from_topic(f"devices/{device_id}/telemetry", "devices")
        gateway = True
    except PayloadRejected:
        gateway = False
    try:
        DeviceCreate.model_validate({"device_id": device_id})
        api = True
    except ValidationError:
        api = False
    assert gateway == api == is_device_id(device_id)


@pytest.mark.parametrize(("name", "ok"), [("temperature", True), ("a:b", False), ("1t", False)])
def test_metric_names(name: str, ok: bool) -> None:
    reading = {"v": 1, "seq": 1, "ts": 1, "sent": 1, "metrics": {name: 1.0}}
    if ok:
        assert Reading.model_validate(reading).metrics == {name: 1.0}
    else:
        with pytest.raises(ValidationError, match="metrics"):
            Reading.model_validate(reading)
