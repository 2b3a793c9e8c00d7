"""Acknowledgement bookkeeping of the gateway, with an in-memory MQTT client."""

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from fleetwatch.contracts.settings import Settings
from fleetwatch.ingest.accept import MAX_DEAD_LETTER_BYTES
from fleetwatch.ingest.acks import handle_ack
from fleetwatch.ingest.gateway import Counters, Gateway, _PendingAck


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
    pending = _PendingAck(client, Counters(), mid=7, qos=1, remaining=3)
    pending(None, None)  # type: ignore[arg-type]
    pending(None, None)  # type: ignore[arg-type]
    assert client.acked == []
    pending(None, None)  # type: ignore[arg-type]
    assert client.acked == [(7, 1)]


def test_a_message_with_a_failed_record_is_never_acknowledged() -> None:
    client, counters = FakeClient(), Counters()
    pending = _PendingAck(client, counters, mid=8, qos=1, remaining=2)
    pending(FakeError(), None)  # type: ignore[arg-type]
    pending(None, None)  # type: ignore[arg-type]
    assert client.acked == []
    assert counters.delivery_errors == 1


def test_qos0_messages_need_no_acknowledgement() -> None:
    client = FakeClient()
    _PendingAck(client, Counters(), mid=0, qos=0, remaining=1)(None, None)  # type: ignore[arg-type]
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


class FakeRecord:
    def __init__(self, topic: str, value: bytes = b'{"seq": 1}', key: bytes = b"d1") -> None:
        self._topic, self._value, self._key = topic, value, key

    def topic(self) -> str:
        return self._topic

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return self._key


def test_a_record_kafka_refuses_is_acknowledged_once_its_dead_letter_is_in() -> None:
    client, counters = FakeClient(), Counters()
    letters: list[object] = []

    def refused(record: object, err: object, pending: object) -> bool:
        letters.append(record)
        return True

    pending = _PendingAck(client, counters, mid=9, qos=1, remaining=2, refused=refused)
    pending(FakeError(), FakeRecord("telemetry.raw"))  # type: ignore[arg-type]
    pending(None, None)  # type: ignore[arg-type]
    assert client.acked == [], "not before the dead letter is delivered"
    # the dead letter is delivered
    pending(None, None)  # type: ignore[arg-type]
    assert client.acked == [(9, 1)]
    assert len(letters) == 1
    assert counters.delivery_errors == 0


def test_the_gateway_sends_a_refused_record_to_the_dead_letter_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings()
    gateway = Gateway(settings, clock=lambda: 1234)
    produced: list[tuple[Any, ...]] = []
    monkeypatch.setattr(gateway, "_produce", lambda *args: produced.append(args))
    client = FakeClient()
    pending = _PendingAck(client, gateway.counters, 3, 1, 1, gateway._on_refused)
    big = b"x" * (MAX_DEAD_LETTER_BYTES + 10)
    pending(FakeError(), FakeRecord(settings.topics.telemetry_raw, big))  # type: ignore[arg-type]
    assert produced == [], "produced from the main loop, not inside the producer's poll"
    gateway._redirect_refused()
    ((topic, key, value, ts, on_delivery, headers),) = produced
    assert topic == settings.topics.telemetry_deadletter
    assert (key, ts, on_delivery) == (b"d1", 1234, pending)
    assert len(value) == MAX_DEAD_LETTER_BYTES
    named = dict(headers)
    assert (
        named["fw.reason"]
        == f"Kafka refused the record for {settings.topics.telemetry_raw}: broker down".encode()
    )
    assert named["fw.source_topic"] == settings.topics.telemetry_raw.encode()
    assert named["fw.payload_bytes"] == str(len(big)).encode()
    assert gateway.counters.redirected == 1
    on_delivery(None, None)  # the dead letter is in Kafka
    assert client.acked == [(3, 1)]
    # a dead letter Kafka refuses too leaves its message unacknowledged (nothing is lost)
    again = _PendingAck(client, gateway.counters, 4, 1, 1, gateway._on_refused)
    again(FakeError(), FakeRecord(settings.topics.telemetry_deadletter))  # type: ignore[arg-type]
    assert (4, 1) not in client.acked
    assert gateway.counters.delivery_errors == 1


class RefusingProducer:
    """A producer that refuses the first record at once, as librdkafka does one over its
    ``message.max.bytes``, and queues the rest (their delivery reports kept to be run)."""

    def __init__(self) -> None:
        self.queued: list[tuple[str, bytes, Any]] = []
        self.refusals = 1

    def produce(self, topic: str, value: bytes, key: bytes, **kwargs: Any) -> None:
        if self.refusals:
            self.refusals -= 1
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.queued.append((topic, value, kwargs["on_delivery"]))

    def __len__(self) -> int:
        return len(self.queued)


def test_a_record_produce_refuses_at_once_is_dead_lettered_and_its_message_acknowledged() -> None:
    settings = Settings()
    gateway = Gateway(settings, clock=lambda: 1234)
    producer = RefusingProducer()
    gateway.producer = producer  # type: ignore[assignment]
    client = FakeClient()
    pending = _PendingAck(client, gateway.counters, 5, 1, 1, gateway._on_refused)
    gateway._produce(settings.topics.telemetry_raw, b"d1", b'{"seq": 1}', 1234, pending)
    assert producer.queued == [], "nothing queued: it was refused"
    assert client.acked == [], "not before its dead letter is in"
    gateway._redirect_refused()
    ((topic, value, on_delivery),) = producer.queued
    assert topic == settings.topics.telemetry_deadletter
    assert value == b'{"seq": 1}'
    on_delivery(None, FakeRecord(topic, value))
    assert client.acked == [(5, 1)]
    assert gateway.counters.delivery_errors == 0
