"""Commands: idempotent issue, the lifecycle pending → sent → acked | failed | timed_out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.contracts.commands import CommandAck
from fleetwatch.serving.control.tracker import CommandTracker
from fleetwatch.serving.metrics import Metrics
from fleetwatch.serving.store.ingest import AckRecord, Batch, write
from tests.polling import wait_until
from tests.unit.api_support import Api, make_alert, running_api


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    for api in running_api(tmp_path):
        api.post("/devices", json={"device_id": "pump-7"})
        yield api


def send(api: Api, key: str, scope: str = "operate", **body: Any) -> Any:
    return api.post(
        "/devices/pump-7/commands",
        scope=scope,
        headers={"Idempotency-Key": key},
        json=body or {"name": "set_interval", "args": {"interval_ms": 500}},
    )


def ack(
    api: Api, command_id: str, status: str = "ok", detail: str = "", device: str = "pump-7"
) -> None:
    answer = CommandAck.model_validate(
        {"command_id": command_id, "status": status, "detail": detail, "device_ms": 5}
    )
    with api.store.session() as session, session.begin():
        write(session, Batch(acks=[AckRecord(answer, device)]), now=10)


def tracker_step(api: Api) -> None:
    CommandTracker(api.store, api.publisher, Metrics()).step()


def test_a_command_is_published_once_per_idempotency_key(api: Api) -> None:
    first = send(api, "k-1")
    assert first.status_code == 201, first.text
    body = first.json()
    assert (body["status"], body["device_id"], body["name"]) == ("sent", "pump-7", "set_interval")
    again = send(api, "k-1")
    assert again.status_code == 200
    assert again.json()["command_id"] == body["command_id"]
    assert [c.command_id for c in api.publisher.published] == [body["command_id"]]
    wire = api.publisher.published[0]
    assert (wire.device_id, wire.args) == ("pump-7", {"interval_ms": 500})

    other = send(api, "k-1", name="reboot")
    assert other.status_code == 409
    assert "k-1" in other.json()["detail"]
    assert send(api, "k-2", name="reboot").json()["command_id"] != body["command_id"]


def test_the_device_answer_decides_acked_or_failed(api: Api) -> None:
    ok = send(api, "a").json()["command_id"]
    bad = send(api, "b", name="dance").json()["command_id"]
    ack(api, ok, "failed", "not mine", device="pump-8")  # another device cannot answer it
    assert api.get(f"/commands/{ok}").json()["status"] == "sent"
    ack(api, ok)
    ack(api, bad, "failed", "unknown command 'dance'")
    assert api.get(f"/commands/{ok}").json()["status"] == "acked"
    failed = api.get(f"/commands/{bad}").json()
    assert (failed["status"], failed["detail"]) == ("failed", "unknown command 'dance'")
    listed = api.get("/commands", params={"device": "pump-7", "status": "failed"}).json()
    assert [c["command_id"] for c in listed["data"]] == [bad]


def test_an_unanswered_command_times_out_after_its_ttl(api: Api) -> None:
    cid = send(api, "t", name="reboot", ttl_s=0.05).json()["command_id"]

    def timed_out() -> bool:
        tracker_step(api)
        return bool(api.get(f"/commands/{cid}").json()["status"] == "timed_out")

    wait_until(timed_out, 5, "the command to time out", interval_s=0.02)
    ack(api, cid)  # a late answer is kept, the outcome stays
    late = api.get(f"/commands/{cid}").json()
    assert (late["status"], late["ack_status"]) == ("timed_out", "ok")
    assert late["detail"].startswith("acknowledged after the timeout")


def test_a_command_kafka_did_not_take_stays_pending_and_is_sent_later(api: Api) -> None:
    api.publisher.failing = True
    body = send(api, "p").json()
    assert body["status"] == "pending"
    assert "waiting for Kafka" in body["detail"]
    api.publisher.failing = False

    def sent() -> bool:
        tracker_step(api)
        return bool(api.get(f"/commands/{body['command_id']}").json()["status"] == "sent")

    wait_until(sent, 10, "the tracker to re-send the command", interval_s=0.1)
    assert [c.command_id for c in api.publisher.published] == [body["command_id"]]


def test_a_command_can_answer_an_alert(api: Api) -> None:
    alert = make_alert("pump-7", 1, 1_000)
    with api.store.session() as session, session.begin():
        write(session, Batch(alerts=[alert]), now=1)
    cid = send(api, "x", name="calibrate", alert_id=alert.alert_id).json()["command_id"]
    assert api.get(f"/alerts/{alert.alert_id}").json()["commands"] == [cid]


def test_bad_command_requests_are_specific(api: Api) -> None:
    unknown = api.post(
        "/devices/ghost/commands",
        scope="operate",
        headers={"Idempotency-Key": "g"},
        json={"name": "reboot"},
    )
    assert unknown.status_code == 404
    assert "ghost" in unknown.json()["detail"]
    no_key = api.post("/devices/pump-7/commands", scope="operate", json={"name": "reboot"})
    assert no_key.status_code == 422
    assert no_key.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    bad_name = send(api, "n", name="Not A Name")
    assert bad_name.status_code == 422
    assert bad_name.json()["detail"][0]["loc"] == ["body", "name"]
    assert send(api, "z", name="reboot", ttl_s=-1).status_code == 422
