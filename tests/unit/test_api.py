from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetwatch.contracts.alerts import Alert, alert_id
from fleetwatch.contracts.settings import Settings
from fleetwatch.serving.app import create_app
from fleetwatch.serving.store import AlertStore


def make_alert(device_id: str, seq: int, event_ms: int) -> Alert:
    return Alert(
        alert_id=alert_id(device_id, "temperature", "fixed-baseline", event_ms),
        device_id=device_id,
        metric="temperature",
        detector="fixed-baseline",
        params_version=0,
        seq=seq,
        event_ms=event_ms,
        received_ms=event_ms + 10,
        detected_ms=event_ms + 500,
        value=45.0,
        expected=21.0,
        band=8.0,
        score=0.67,
        reason="temperature=45 outside 21±8",
    )


@pytest.fixture
def store(tmp_path: Path) -> AlertStore:
    return AlertStore(f"sqlite:///{tmp_path / 'api.db'}")


@pytest.fixture
def client(store: AlertStore, tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(run_dir=tmp_path), store=store, materialise=False)
    with TestClient(app) as test_client:
        yield test_client


def test_storing_the_same_alert_twice_keeps_one(store: AlertStore) -> None:
    alert = make_alert("d1", 5, 1_000)
    assert store.add([alert, alert], stored_ms=1) == 1
    assert store.add([alert], stored_ms=2) == 0
    assert len(store.alerts()) == 1


def test_alerts_are_listed_newest_first_and_filtered(client: TestClient, store: AlertStore) -> None:
    store.add(
        [make_alert("d1", 1, 1_000), make_alert("d2", 2, 3_000), make_alert("d1", 3, 2_000)], 9
    )
    body = client.get("/alerts").json()
    assert [a["event_ms"] for a in body["data"]] == [3_000, 2_000, 1_000]
    only_d1 = client.get("/alerts", params={"device_id": "d1", "limit": 1}).json()
    assert [(a["device_id"], a["seq"]) for a in only_d1["data"]] == [("d1", 3)]


def test_a_device_shows_its_count_and_last_alert(client: TestClient, store: AlertStore) -> None:
    store.add([make_alert("d1", 1, 1_000), make_alert("d1", 3, 2_000)], 9)
    body = client.get("/devices/d1").json()
    assert body["alert_count"] == 2
    assert body["last_alert"]["seq"] == 3


def test_an_unknown_device_is_a_404_with_a_reason(client: TestClient) -> None:
    response = client.get("/devices/nope")
    assert response.status_code == 404
    assert "nope" in response.json()["detail"]


def test_a_bad_limit_is_a_422(client: TestClient) -> None:
    assert client.get("/alerts", params={"limit": 0}).status_code == 422
