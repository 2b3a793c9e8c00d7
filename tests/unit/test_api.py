"""Devices and alerts through the API, on an in-memory store fed as the materialiser feeds it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from fleetwatch.contracts.devices import DeviceSession, DeviceState, session_id
from fleetwatch.contracts.telemetry import TelemetryRecord
from fleetwatch.serving.store import Store
from fleetwatch.serving.store.ingest import Batch, ModelRecord, prune_readings, write
from fleetwatch.serving.tables import AlertEventRow, AlertRow
from tests.unit.api_support import Api, make_alert, memory_store, running_api


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from running_api(tmp_path)


def feed(store: Store, now: int = 9, **records: Any) -> None:
    with store.session() as session, session.begin():
        write(session, Batch(**records), now)


def state(device_id: str, updated_ms: int, status: str = "ok") -> DeviceState:
    return DeviceState.model_validate(
        {
            "device_id": device_id,
            "status": status,
            "last_seen_ms": updated_ms - 5,
            "last_received_ms": updated_ms - 3,
            "last_seq": updated_ms // 10,
            "last_values": {"temperature": 21.5},
            "open_alerts": [],
            "params_version": 3,
            "clock_offset_ms": 12,
            "session_id": None,
            "updated_ms": updated_ms,
        }
    )


def test_storing_the_same_alert_twice_keeps_one() -> None:
    store = memory_store()
    alert = make_alert("d1", 5, 1_000)
    feed(store, alerts=[alert, alert])
    feed(store, alerts=[alert])
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(AlertRow)) == 1
        assert session.scalar(select(func.count()).select_from(AlertEventRow)) == 1


def test_an_episode_is_one_row_with_its_latest_event_whatever_the_order() -> None:
    store = memory_store()
    opened = make_alert("d1", 1, 1_000)
    updated = make_alert("d1", 2, 2_000, "update", 1, start_ms=1_000)
    resolved = make_alert("d1", 3, 3_000, "resolve", 2, start_ms=1_000)
    feed(store, alerts=[resolved])
    feed(store, alerts=[opened, updated])  # late: must not replace the resolution
    with store.session() as session:
        rows = session.scalars(select(AlertRow)).all()
        history = session.scalars(select(AlertEventRow.revision)).all()
    assert len(rows) == 1
    assert (rows[0].status, rows[0].state, rows[0].revision) == ("resolve", "resolved", 2)
    assert (rows[0].start_ms, rows[0].end_ms) == (1_000, 3_000)
    assert sorted(history) == [0, 1, 2]


def test_alerts_are_listed_newest_first_and_filtered(api: Api) -> None:
    feed(
        api.store,
        alerts=[make_alert("d1", 1, 1_000), make_alert("d2", 2, 3_000), make_alert("d1", 3, 2_000)],
    )
    body = api.get("/alerts").json()
    assert [a["start_ms"] for a in body["data"]] == [3_000, 2_000, 1_000]
    assert body["count"] == 3
    only_d1 = api.get("/alerts", params={"device": "d1", "limit": 1}).json()
    assert [(a["device_id"], a["seq"]) for a in only_d1["data"]] == [("d1", 3)]
    assert only_d1["count"] == 2
    legacy = api.get("/alerts", params={"device_id": "d1"}).json()
    assert legacy["count"] == 2


def test_alert_filters_by_severity_state_and_time(api: Api) -> None:
    feed(
        api.store,
        alerts=[
            make_alert("d1", 1, 1_000, severity="critical"),
            make_alert("d1", 2, 2_000),
            make_alert("d1", 3, 5_000, "resolve", 1, start_ms=2_000),
            make_alert("d2", 4, 4_000, severity="info"),
        ],
    )

    def starts(**params: object) -> list[int]:
        return [a["start_ms"] for a in api.get("/alerts", params=params).json()["data"]]

    assert starts(severity="critical") == [1_000]
    assert starts(state="resolved") == [2_000]
    assert starts(state="open") == [4_000, 1_000]
    assert starts(**{"from": 1_500, "to": 4_000}) == [2_000]


def test_an_alert_shows_its_events_and_can_be_acknowledged(api: Api) -> None:
    opened = make_alert("d1", 1, 1_000)
    feed(api.store, alerts=[opened, make_alert("d1", 2, 2_000, "update", 1, start_ms=1_000)])
    one = api.get(f"/alerts/{opened.alert_id}").json()
    assert [e["status"] for e in one["events"]] == ["open", "update"]
    assert one["acknowledged_ms"] is None

    ack = api.post(
        f"/alerts/{opened.alert_id}/ack", scope="operate", json={"comment": "on it"}
    ).json()
    assert (ack["acknowledged_by"], ack["ack_comment"]) == ("operate-key", "on it")
    assert ack["acknowledged_ms"] > 0
    unacked = api.get("/alerts", params={"acknowledged": False}).json()
    assert unacked["count"] == 0
    assert api.post("/alerts/nope/ack", scope="operate", json={}).status_code == 404


def test_a_device_shows_its_state_counts_and_last_alert(api: Api) -> None:
    feed(api.store, alerts=[make_alert("d1", 1, 1_000), make_alert("d1", 3, 2_000)])
    feed(api.store, states=[state("d1", 5_000, "alerting")])
    feed(api.store, states=[state("d1", 4_000, "ok")])  # older: ignored
    body = api.get("/devices/d1").json()
    assert body["alert_count"] == 2
    assert body["open_alert_count"] == 2
    assert body["last_alert"]["seq"] == 3
    assert body["status"] == "alerting"
    assert body["state"]["updated_ms"] == 5_000
    assert body["kind"] is None  # known from its records only: no kind until registered
    assert body["registered"] is False


def test_an_unknown_device_is_a_404_with_a_reason(api: Api) -> None:
    response = api.get("/devices/nope")
    assert response.status_code == 404
    assert "nope" in response.json()["detail"]


def test_devices_are_registered_filtered_updated_and_deleted(api: Api) -> None:
    created = api.post(
        "/devices",
        json={"device_id": "pump-1", "kind": "pump", "tags": ["site-a", "north"]},
    )
    assert created.status_code == 201, created.text
    assert created.json()["tags"] == ["north", "site-a"]
    assert api.post("/devices", json={"device_id": "pump-1"}).status_code == 409
    api.post("/devices", json={"device_id": "fan-1", "kind": "fan", "tags": ["site-b"]})
    feed(api.store, states=[state("fan-1", 1_000, "silent")])

    def ids(**params: object) -> list[str]:
        return [d["device_id"] for d in api.get("/devices", params=params).json()["data"]]

    assert ids() == ["fan-1", "pump-1"]
    assert ids(tag="site-a") == ["pump-1"]
    assert ids(kind="fan") == ["fan-1"]
    assert ids(status="silent") == ["fan-1"]
    assert ids(status="unknown") == ["pump-1"]

    patched = api.client.patch(
        "/devices/pump-1",
        headers=api.as_("admin"),
        json={"name": "Pump 1", "attributes": {"site": "a"}, "tags": ["south"]},
    ).json()
    assert (patched["name"], patched["attributes"], patched["tags"]) == (
        "Pump 1",
        {"site": "a"},
        ["south"],
    )
    assert api.client.delete("/devices/pump-1", headers=api.as_("admin")).status_code == 204
    assert api.get("/devices/pump-1").status_code == 404
    assert ids() == ["fan-1"]


def test_sessions_model_and_recent_telemetry(api: Api) -> None:
    sid = session_id("d1", 1_000)
    growing = DeviceSession(
        session_id=sid,
        device_id="d1",
        start_ms=1_000,
        end_ms=2_000,
        readings=5,
        first_seq=1,
        last_seq=5,
    )
    ended = growing.model_copy(update={"end_ms": 3_000, "readings": 9, "end_reason": "gap"})
    feed(api.store, sessions=[ended])
    feed(api.store, sessions=[growing])  # an older record of the same session
    model = ModelRecord(
        device_id="d1",
        kind="seasonal",
        version=7,
        trained_from_ms=1_000,
        trained_to_ms=3_000,
        published_ms=3_500,
        params={"kind": "seasonal"},
    )
    older = model.model_copy(update={"version": 6, "params": {}})
    feed(api.store, models=[model, older])
    readings = [
        TelemetryRecord(
            device_id="d1",
            seq=i,
            event_ms=1_000 + i,
            device_event_ms=1_000 + i,
            device_sent_ms=1_000 + i,
            received_ms=1_001 + i,
            metrics={"t": float(i)},
        )
        for i in range(10)
    ]
    feed(api.store, readings=readings + readings[:3])

    sessions = api.get("/devices/d1/sessions").json()
    assert [(s["readings"], s["end_reason"]) for s in sessions["data"]] == [(9, "gap")]
    assert api.get("/devices/d1/model").json()["version"] == 7
    recent = api.get("/devices/d1/telemetry", params={"from": 1_002, "to": 1_008}).json()
    assert [r["seq"] for r in recent["data"]] == [2, 3, 4, 5, 6, 7]
    with api.store.session() as session, session.begin():
        assert prune_readings(session, ["d1"], keep=4) == 6
    assert [r["seq"] for r in api.get("/devices/d1/telemetry").json()["data"]] == [6, 7, 8, 9]
    with api.store.session() as session, session.begin():  # past its retention: however few
        assert prune_readings(session, ["d1"], keep=4, older_than_ms=1_008) == 2
    assert [r["seq"] for r in api.get("/devices/d1/telemetry").json()["data"]] == [8, 9]
    forgotten = Batch()
    forgotten.forget_model("d1")  # the trainer's tombstone: the device is forgotten
    with api.store.session() as session, session.begin():
        write(session, forgotten, 9)
    assert api.get("/devices/d1/telemetry").json()["data"] == []
    assert api.get("/devices/d1/model").status_code == 404
    assert api.get("/devices/zz/model").status_code == 404


def test_a_bad_limit_is_a_422_naming_the_field(api: Api) -> None:
    response = api.get("/alerts", params={"limit": 0})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "limit"]
    bad_body = api.post("/devices", json={"device_id": "bad id!"})
    assert bad_body.status_code == 422
    assert bad_body.json()["detail"][0]["loc"] == ["body", "device_id"]


def test_health_and_readiness(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    assert api.client.get("/readyz").status_code == 200
    api.publisher.up = False
    degraded = api.client.get("/readyz")  # reads come from the database (test_api_readiness)
    assert degraded.status_code == 200
    assert degraded.json()["kafka"] == "unreachable"


def test_state_session_and_model_read_back_in_the_api_s_shapes(api: Api) -> None:
    """The public schemas are the contracts' (and the model record's): the API answers with the
    fields the store keeps of each record, in this order."""
    sid = session_id("d1", 1)
    record = state("d1", 1_000, "quarantined").model_copy(
        update={
            "firmware": "1.2",
            "session_id": sid,
            "late_readings": 4,
            "quarantined_until_ms": 5_000,
            "quarantine_reason": "boom",
        }
    )
    session = DeviceSession(
        session_id=sid, device_id="d1", start_ms=1, end_ms=900, readings=9, first_seq=1, last_seq=9
    )
    model = ModelRecord(
        device_id="d1",
        kind="seasonal",
        version=7,
        trained_from_ms=1,
        trained_to_ms=None,
        published_ms=3,
        params={"x": [1.5]},
    )
    feed(api.store, states=[record], sessions=[session], models=[model])

    got = api.get("/devices/d1").json()["state"]
    assert list(got.items()) == [
        ("status", "quarantined"),
        ("last_seen_ms", 995),
        ("last_received_ms", 997),
        ("last_seq", 100),
        ("last_values", {"temperature": 21.5}),
        ("open_alerts", []),
        ("params_version", 3),
        ("clock_offset_ms", 12),
        ("session_id", sid),
        ("quarantined_until_ms", 5_000),
        ("quarantine_reason", "boom"),
        ("updated_ms", 1_000),
    ]
    [got] = api.get("/devices/d1/sessions").json()["data"]
    assert list(got.items()) == [
        ("session_id", sid),
        ("device_id", "d1"),
        ("start_ms", 1),
        ("end_ms", 900),
        ("readings", 9),
        ("first_seq", 1),
        ("last_seq", 9),
        ("end_reason", None),
    ]
    got = api.get("/devices/d1/model").json()
    assert list(got.items()) == [
        ("device_id", "d1"),
        ("kind", "seasonal"),
        ("version", 7),
        ("trained_from_ms", 1),
        ("trained_to_ms", None),
        ("published_ms", 3),
        ("params", {"x": [1.5]}),
    ]
