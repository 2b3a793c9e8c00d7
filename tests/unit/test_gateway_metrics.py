"""The gateway's metrics, counted on its own code paths (MQTT message in, records produced,
delivery reports back, connection events) with in-memory fakes for MQTT and Kafka."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry

from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.ingest.accept import Accepted, Outcome
from fleetwatch.ingest.commands import CommandRelay
from fleetwatch.ingest.gateway import Gateway, _Acks
from fleetwatch.ingest.metrics import (
    DEAD_LETTER_REASONS,
    MULTIPROCESS_ENV,
    GatewayMetrics,
    supervisor_registry,
    worker_gone,
)
from tests.unit.test_command_relay import Broker, FakeConsumer, Record, command

NOW = 1_800_000_000_000
SETTINGS = Settings()


class FakeClient:
    """paho's side of the gateway: acknowledgements and subscriptions, recorded."""

    def __init__(self) -> None:
        self.acked: list[tuple[int, int]] = []
        self.subscribed: list[Any] = []
        self.unsubscribed: list[Any] = []

    def ack(self, mid: int, qos: int) -> None:
        self.acked.append((mid, qos))

    def ack_all(self, mids: list[int]) -> None:
        self.acked.extend((mid, 1) for mid in mids)

    def subscribe(self, topics: Any) -> None:
        self.subscribed.append(topics)

    def unsubscribe(self, topics: Any) -> None:
        self.unsubscribed.append(topics)


class Delivered:
    """A record as a delivery report hands it back."""

    def __init__(self, topic: str, key: bytes, value: bytes, latency: float | None) -> None:
        self._topic, self._key, self._value, self._latency = topic, key, value, latency

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def latency(self) -> float | None:
        return self._latency


class Reason:
    def __init__(self, failure: bool = False) -> None:
        self.is_failure = failure


class Flags:
    session_present = True


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> tuple[Gateway, list[tuple[Any, ...]]]:
    """A gateway whose producer calls are recorded instead of sent."""
    gw = Gateway(SETTINGS, clock=lambda: NOW, metrics=GatewayMetrics())
    produced: list[tuple[Any, ...]] = []
    monkeypatch.setattr(gw, "_produce", lambda *args: produced.append(args))
    return gw, produced


def value(metrics: GatewayMetrics, name: str, **labels: str) -> float:
    metrics.flush()  # as the gateway's main loop does a few times a second
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def message(topic: str, payload: bytes, mid: int = 1, qos: int = 1) -> mqtt.MQTTMessage:
    msg = mqtt.MQTTMessage(mid, topic.encode())
    msg.payload, msg.qos = payload, qos
    return msg


def mqtt_client(gw: Gateway) -> FakeClient:
    """The gateway's MQTT client, recording what it is told to acknowledge."""
    client = FakeClient()
    gw._acks = _Acks(client)  # type: ignore[arg-type]
    return client


def receive(gw: Gateway, client: FakeClient, msg: mqtt.MQTTMessage) -> None:
    """An MQTT message arrives (paho's network thread calls the gateway)."""
    gw._on_message(client, None, msg)  # type: ignore[arg-type]


def deliver(gw: Gateway, produced: list[tuple[Any, ...]], latency: float = 0.004) -> None:
    """Kafka confirms every record produced so far (one producer poll's delivery reports),
    and the gateway acknowledges the messages they settled, as its main loop does."""
    for topic, key, value_, _, on_delivery, *_ in produced:
        on_delivery(None, Delivered(topic, key, value_, latency))
    produced.clear()
    gw._acks.send()


def telemetry(device: str) -> str:
    return SETTINGS.mqtt.telemetry_topic(device)


def test_accepted_readings_their_clock_offsets_and_clamps_are_counted(
    gateway: tuple[Gateway, list[tuple[Any, ...]]],
) -> None:
    gw, produced = gateway
    client = mqtt_client(gw)
    # a device 90 s behind the gateway's clock: offset 90 s
    receive(
        gw,
        client,
        message(telemetry("d1"), reading_payload(1, NOW - 90_000 - 5, NOW - 90_000, {"t": 1.0}), 1),
    )
    # its clock then jumps 10 minutes ahead: the corrected time is clamped to the arrival
    jumped = NOW + 600_000
    batch = b"[" + reading_payload(2, jumped, jumped, {"t": 1.0}) + b"]"
    receive(gw, client, message(telemetry("d1"), batch, 2))
    m = gw.metrics
    assert value(m, "fleetwatch_gateway_mqtt_messages_total") == 2
    assert value(m, "fleetwatch_gateway_readings_accepted_total") == 2
    assert value(m, "fleetwatch_gateway_clamped_event_times_total") == 1
    assert value(m, "fleetwatch_gateway_clock_offset_seconds_count") == 2
    # 90 s behind, then the clamp's offset: the arrival minus a device time 600 s ahead
    assert value(m, "fleetwatch_gateway_clock_offset_seconds_bucket", le="30.0") == 0
    assert value(m, "fleetwatch_gateway_clock_offset_seconds_bucket", le="120.0") == 1
    assert value(m, "fleetwatch_gateway_clock_offset_seconds_bucket", le="600.0") == 2
    assert value(m, "fleetwatch_gateway_in_flight_messages") == 2
    deliver(gw, produced, latency=0.004)
    assert value(m, "fleetwatch_gateway_in_flight_messages") == 0
    assert client.acked == [(1, 1), (2, 1)]
    assert value(m, "fleetwatch_gateway_produce_latency_seconds_count") == 2
    assert value(m, "fleetwatch_gateway_produce_latency_seconds_bucket", le="0.005") == 2
    assert value(m, "fleetwatch_gateway_produce_latency_seconds_bucket", le="0.0025") == 0


def test_dead_letters_are_counted_by_the_kind_of_each_readings_rejection(
    gateway: tuple[Gateway, list[tuple[Any, ...]]],
) -> None:
    gw, _ = gateway
    client = mqtt_client(gw)
    ok = reading_payload(1, NOW - 5, NOW, {"t": 1.0})
    early = reading_payload(2, NOW + 120_000, NOW, {"t": 1.0})  # sent before it happened
    not_finite = b'{"v":1,"seq":3,"ts":1,"sent":1,"metrics":{"t":"x"}}'
    batch = b"[" + b",".join([ok, early, not_finite, not_finite]) + b"]"
    receive(gw, client, message(telemetry("d1"), batch))
    receive(gw, client, message(telemetry("d1"), b"{not json", 2))
    receive(gw, client, message("elsewhere/d1/telemetry", ok, 3))
    ack = SETTINGS.mqtt.acks_topic("d1")
    receive(gw, client, message(ack, b'{"command_id":"c-1"}', 4))
    m = gw.metrics
    counted = {
        reason: value(m, "fleetwatch_gateway_dead_lettered_total", reason=reason)
        for reason in DEAD_LETTER_REASONS
    }
    assert {k: v for k, v in counted.items() if v} == {
        "sent_before_event": 1,
        "schema": 2,
        "json": 1,
        "topic": 1,
        "ack_invalid": 1,
    }
    assert value(m, "fleetwatch_gateway_readings_accepted_total") == 1
    assert set(DEAD_LETTER_REASONS) >= {"topic", "too_large", "clock_skew", "kafka_refused"}


def test_a_record_kafka_refuses_is_counted_as_a_delivery_error_and_a_dead_letter(
    gateway: tuple[Gateway, list[tuple[Any, ...]]],
) -> None:
    gw, produced = gateway
    client = mqtt_client(gw)
    payload = reading_payload(1, NOW - 5, NOW, {"t": 1.0})
    receive(gw, client, message(telemetry("d1"), payload))
    ((topic, key, record, _, on_delivery, *_),) = produced
    produced.clear()
    on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), Delivered(topic, key, record, None))
    m = gw.metrics
    assert (
        value(m, "fleetwatch_gateway_kafka_delivery_errors_total", error="MSG_SIZE_TOO_LARGE") == 1
    )
    assert value(m, "fleetwatch_gateway_dead_lettered_total", reason="kafka_refused") == 1
    assert value(m, "fleetwatch_gateway_in_flight_messages") == 1, "until its dead letter is in"
    gw._redirect_refused()
    deliver(gw, produced)
    assert value(m, "fleetwatch_gateway_in_flight_messages") == 0
    assert client.acked == [(1, 1)]
    assert value(m, "fleetwatch_gateway_produce_latency_seconds_count") == 1  # the dead letter


def test_connections_and_reconnections_are_counted(
    gateway: tuple[Gateway, list[tuple[Any, ...]]],
) -> None:
    gw, _ = gateway
    client: Any = FakeClient()
    m = gw.metrics
    gw._on_connect(client, None, Flags(), Reason(), None)
    assert value(m, "fleetwatch_gateway_mqtt_connected") == 1
    assert value(m, "fleetwatch_gateway_mqtt_reconnects_total") == 0
    gw._on_disconnect(client, None, None, Reason(True), None)
    assert value(m, "fleetwatch_gateway_mqtt_connected") == 0
    gw._on_connect(client, None, Flags(), Reason(True), None)  # refused
    gw._on_connect(client, None, Flags(), Reason(), None)
    assert value(m, "fleetwatch_gateway_mqtt_reconnects_total") == 1
    assert value(m, "fleetwatch_gateway_mqtt_connected") == 1


def test_relayed_and_invalid_commands_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = GatewayMetrics()
    broker = Broker()
    broker.up = True
    relay = CommandRelay(SETTINGS, broker, metrics)  # type: ignore[arg-type]
    monkeypatch.setattr(relay, "consumer", FakeConsumer([Record(command(1), 0), Record(b"?", 1)]))
    assert relay.pump() == 2
    assert value(metrics, "fleetwatch_gateway_commands_relayed_total") == 1
    assert value(metrics, "fleetwatch_gateway_commands_invalid_total") == 1


WORKER = """
from fleetwatch.ingest.metrics import GatewayMetrics
m = GatewayMetrics()
m.accepted.inc(3)
m.in_flight.inc(2)
m.dead_lettered.labels("json").inc()
"""


def test_the_supervisor_serves_the_sum_of_its_workers(tmp_path: Path) -> None:
    kept = tmp_path / "metrics"
    kept.mkdir()
    (kept / "counter_1.db").write_bytes(b"left by an earlier run")
    registry = supervisor_registry(kept)
    assert not (kept / "counter_1.db").exists(), "an earlier run's figures are not added"
    env = {**os.environ, MULTIPROCESS_ENV: str(kept)}
    workers = [subprocess.run([sys.executable, "-c", WORKER], env=env, check=True) for _ in "ab"]
    assert len(workers) == 2
    assert registry.get_sample_value("fleetwatch_gateway_readings_accepted_total") == 6
    labels = {"reason": "json"}
    assert registry.get_sample_value("fleetwatch_gateway_dead_lettered_total", labels) == 2
    assert registry.get_sample_value("fleetwatch_gateway_in_flight_messages") == 4
    pids = sorted(int(p.stem.rsplit("_", 1)[1]) for p in kept.glob("gauge_livesum_*.db"))
    worker_gone(pids[0], kept)
    assert registry.get_sample_value("fleetwatch_gateway_in_flight_messages") == 2
    assert registry.get_sample_value("fleetwatch_gateway_readings_accepted_total") == 6


def test_label_sets_are_bounded_from_the_start() -> None:
    metrics = GatewayMetrics(CollectorRegistry())
    metrics.delivery_errors.labels("MSG_SIZE_TOO_LARGE").inc()
    samples = [s for family in metrics.registry.collect() for s in family.samples]
    assert {name for s in samples for name in s.labels} == {"reason", "error", "le"}
    reasons = {s.labels["reason"] for s in samples if "reason" in s.labels}
    assert reasons == set(DEAD_LETTER_REASONS), "every reason exported from the start, at 0"


def test_counted_per_message_and_published_in_batches_as_if_observed_one_by_one() -> None:
    """The clock offsets and produce latencies are counted in plain integers and added to the
    histograms at a flush: the same figures as observing each value at once."""
    batched, direct = GatewayMetrics(CollectorRegistry()), GatewayMetrics(CollectorRegistry())
    offsets_ms = [0, 5, 10, 50, 250, 999, 1000, 7_200_000, 86_400_000, 10**12]
    latencies = [0.0, 0.0005, 0.001, 0.004, 0.05, 3.0, 1e4]
    outcome = Outcome(accepted=[Accepted(b"d1", b"{}", 1, 1, False, ms) for ms in offsets_ms])
    for half in (outcome.accepted[:4], outcome.accepted[4:]):
        batched.handled(Outcome(accepted=half), telemetry=True)
        batched.flush()
    for seconds in latencies:
        batched.delivered(None, Delivered("t", b"k", b"v", seconds))  # type: ignore[arg-type]
    batched.settled()
    for ms in offsets_ms:
        direct.clock_offset.observe(ms / 1000)
    for seconds in latencies:
        direct.produce_latency.observe(seconds)
    direct.messages.inc(2)
    direct.accepted.inc(len(offsets_ms))
    direct.in_flight.set(1)
    assert value(batched, "fleetwatch_gateway_in_flight_messages") == 1, "two in, one settled"

    def samples(m: GatewayMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in m.registry.collect()
            for s in family.samples
            if not s.name.endswith("_created")
        }

    assert samples(batched) == samples(direct)
