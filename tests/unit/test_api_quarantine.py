"""A quarantined device through the API: its state says so, with why and until when; an
operator lifts it, which puts a lift record on ``device.quarantine-lifts`` for the scorer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.contracts.devices import DeviceState
from tests.unit.api_support import Api, running_api
from tests.unit.test_api import feed, state


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from running_api(tmp_path)


def quarantined(device_id: str, updated_ms: int) -> DeviceState:
    fields = state(device_id, updated_ms).model_dump()
    fields |= {
        "status": "quarantined",
        "quarantined_until_ms": updated_ms + 3_600_000,
        "quarantine_reason": "scoring failed: ValueError: boom",
    }
    return DeviceState.model_validate(fields)


def test_a_quarantined_device_shows_why_and_until_when_and_is_found_by_status(api: Api) -> None:
    feed(api.store, states=[quarantined("q1", 1_000), state("ok1", 1_000)])
    body = api.get("/devices/q1").json()
    assert body["status"] == "quarantined"
    assert body["state"]["quarantined_until_ms"] == 1_000 + 3_600_000
    assert body["state"]["quarantine_reason"] == "scoring failed: ValueError: boom"
    listed = api.get("/devices", params={"status": "quarantined"}).json()
    assert [d["device_id"] for d in listed["data"]] == ["q1"]


def test_lifting_publishes_a_lift_for_the_scorer_and_needs_the_admin_scope(api: Api) -> None:
    feed(api.store, states=[quarantined("q1", 1_000)])
    assert api.post("/devices/q1/quarantine/lift", scope="read").status_code == 403
    response = api.post("/devices/q1/quarantine/lift", scope="admin")
    assert response.status_code == 202
    lifted_ms = response.json()["lifted_ms"]
    assert api.publisher.lifts == [("q1", lifted_ms)]
    assert api.post("/devices/nobody/quarantine/lift", scope="admin").status_code == 404


def test_a_lift_kafka_does_not_take_is_a_503_with_the_reason(api: Api) -> None:
    feed(api.store, states=[quarantined("q1", 1_000)])
    api.publisher.failing = True
    response = api.post("/devices/q1/quarantine/lift", scope="admin")
    assert response.status_code == 503
    assert "broker away" in response.json()["detail"]
    assert api.publisher.lifts == []
