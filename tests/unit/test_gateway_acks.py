"""Acknowledgement bookkeeping of the gateway, with an in-memory MQTT client."""

import json

from fleetwatch.ingest.acks import handle_ack
from fleetwatch.ingest.gateway import Counters, _PendingAck


class FakeClient:
    def __init__(self) -> None:
        self.acked: list[tuple[int, int]] = []

    def ack(self, mid: int, qos: int) -> None:
        self.acked.append((mid, qos))


class FakeError:
    def __str__(self) -> str:
        return "broker down"


def test_a_message_is_acknowledged_once_every_record_is_delivered() -> None:
    client = FakeClient()
    pending = _PendingAck(client, Counters(), mid=7, qos=1, records=3)  # type: ignore[arg-type]
    pending(None, None)  # type: ignore[arg-type]
    pending(None, None)  # type: ignore[arg-type]
    assert client.acked == []
    pending(None, None)  # type: ignore[arg-type]
    assert client.acked == [(7, 1)]


def test_a_message_with_a_failed_record_is_never_acknowledged() -> None:
    client, counters = FakeClient(), Counters()
    pending = _PendingAck(client, counters, mid=8, qos=1, records=2)  # type: ignore[arg-type]
    pending(FakeError(), None)  # type: ignore[arg-type]
    pending(None, None)  # type: ignore[arg-type]
    assert client.acked == []
    assert counters.delivery_errors == 1


def test_qos0_messages_need_no_acknowledgement() -> None:
    client = FakeClient()
    _PendingAck(client, Counters(), mid=0, qos=0, records=1)(None, None)  # type: ignore[arg-type]
    assert client.acked == []


def test_a_device_ack_is_forwarded_with_its_device_and_receive_time() -> None:
    payload = (
        b'{"v":1,"command_id":"c-1","status":"failed","detail":"unknown command","device_ms":5}'
    )
    out = handle_ack("devices/d1/acks", payload, 99, "devices")
    (record,) = out.accepted
    assert record.key == b"d1"
    assert json.loads(record.value) == {
        "v": 1,
        "command_id": "c-1",
        "status": "failed",
        "detail": "unknown command",
        "device_ms": 5,
        "device_id": "d1",
        "received_ms": 99,
    }


def test_a_bad_ack_is_a_dead_letter_with_the_reason() -> None:
    (dl,) = handle_ack("devices/d1/acks", b'{"command_id":"c-1"}', 99, "devices").rejected
    assert dl.reason.startswith("command ack: status")
