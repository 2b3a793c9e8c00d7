"""The gateway over the real brokers: readings, batches, dead letters, commands, acks, workers."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from typing import Any

import paho.mqtt.client as mqtt
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from fleetwatch.contracts.commands import Command
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.kafka_config import client_config
from tests.integration.conftest import Isolated
from tests.polling import wait_until

HOT = b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":"hot"}}'


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def payload(seq: int, value: float = 20.0) -> bytes:
    t = now_ms()
    return reading_payload(seq, t - 5, t, {"t": value})


def real_readings(isolated: Isolated, expected: int) -> list[dict[str, Any]]:
    records = [
        json.loads(r.value) for r in isolated.read_all(isolated.topics.telemetry_raw, expected)
    ]
    return [r for r in records if r["device_id"] != "probe"]


def readings_now(isolated: Isolated) -> set[tuple[str, int]]:
    """(device, seq) of every reading on the raw topic now: for a wait that polls until the
    ones it waits for are there (a read to the end, no wait for records that could follow)."""
    records = (json.loads(r.value) for r in isolated.read_to_end(isolated.topics.telemetry_raw))
    return {(r["device_id"], r["seq"]) for r in records if r["device_id"] != "probe"}


def test_good_readings_reach_kafka_and_bad_ones_the_dead_letters_with_a_reason(
    isolated: Isolated,
) -> None:
    isolated.start("gateway", "gateway")
    good = [(f"d{i}", seq) for i in range(3) for seq in range(5)]
    bad = {
        f"{isolated.mqtt_root}/d0/telemetry": b"{not json",
        f"{isolated.mqtt_root}/d1/telemetry": HOT,
        f"{isolated.mqtt_root}/d2/telemetry": b"",
    }
    with isolated.mqtt_client() as client:
        isolated.await_gateway(client)
        for device, seq in good:
            client.publish(
                f"{isolated.mqtt_root}/{device}/telemetry", payload(seq), qos=1
            ).wait_for_publish(10)
        for topic, body in bad.items():
            client.publish(topic, body, qos=1).wait_for_publish(10)

    raw = isolated.read_all(isolated.topics.telemetry_raw, len(good) + 1)
    seen = sorted(
        (r["device_id"], r["seq"])
        for r in map(json.loads, (x.value for x in raw))
        if r["device_id"] != "probe"
    )
    assert seen == sorted(good)
    assert all(r.key == json.loads(r.value)["device_id"].encode() for r in raw)

    dead = isolated.read_all(isolated.topics.telemetry_deadletter, len(bad))
    reasons = {
        r.headers["fw.mqtt_topic"].decode(): (r.value, r.headers["fw.reason"].decode())
        for r in dead
    }
    assert set(reasons) == set(bad)
    for topic, body in bad.items():
        assert reasons[topic][0] == body
    assert reasons[f"{isolated.mqtt_root}/d0/telemetry"][1].startswith("payload: Invalid JSON")
    assert reasons[f"{isolated.mqtt_root}/d1/telemetry"][1].startswith("metrics.t")
    assert reasons[f"{isolated.mqtt_root}/d2/telemetry"][1] == "empty payload"


def test_a_batch_payload_splits_into_readings_and_a_bad_one_is_dead_lettered(
    isolated: Isolated,
) -> None:
    isolated.start("gateway", "gateway")
    batch = [json.loads(payload(s)) for s in range(4)]
    batch[2]["metrics"] = {"t": "warm"}
    with isolated.mqtt_client() as client:
        isolated.await_gateway(client)
        client.publish(
            f"{isolated.mqtt_root}/b1/telemetry", json.dumps(batch), qos=1
        ).wait_for_publish(10)
    assert sorted(r["seq"] for r in real_readings(isolated, 4)) == [0, 1, 3]
    (dead,) = isolated.read_all(isolated.topics.telemetry_deadletter, 1)
    assert dead.headers["fw.batch_index"] == b"2"
    assert dead.headers["fw.reason"].decode().startswith("reading [2]: metrics.t")


def test_commands_reach_the_device_and_its_ack_comes_back(isolated: Isolated) -> None:
    isolated.start("gateway", "gateway")
    received: list[bytes] = []
    got = threading.Event()

    def on_message(client: mqtt.Client, userdata: object, msg: mqtt.MQTTMessage) -> None:
        received.append(bytes(msg.payload))
        got.set()

    command = Command(command_id="c-42", device_id="dev-9", name="calibrate", issued_ms=now_ms())
    with isolated.mqtt_client() as device:
        device.on_message = on_message
        device.subscribe(f"{isolated.mqtt_root}/dev-9/commands", qos=1)[1]
        isolated.await_gateway(device)
        producer = Producer(client_config(isolated.settings.kafka))
        producer.produce(isolated.topics.device_commands, command.model_dump_json(), "dev-9")
        producer.flush(10)
        wait_until(got.is_set, 30, "the command on the device's MQTT topic")
        assert Command.model_validate_json(received[0]) == command
        ack = {"v": 1, "command_id": "c-42", "status": "ok", "detail": "", "device_ms": now_ms()}
        device.publish(f"{isolated.mqtt_root}/dev-9/acks", json.dumps(ack), qos=1).wait_for_publish(
            10
        )
    (record,) = isolated.read_all(isolated.topics.device_command_acks, 1)
    assert record.key == b"dev-9"
    assert json.loads(record.value)["command_id"] == "c-42"
    assert json.loads(record.value)["device_id"] == "dev-9"


def test_several_workers_share_the_load_and_lose_nothing(isolated: Isolated) -> None:
    isolated.start("gateway", "gateway", "--workers", "2")
    sent = [(f"w{i}", seq) for i in range(8) for seq in range(25)]
    with isolated.mqtt_client() as client:
        isolated.await_gateway(client)
        infos = [
            client.publish(f"{isolated.mqtt_root}/{d}/telemetry", payload(s), qos=1)
            for d, s in sent
        ]
        for info in infos:
            info.wait_for_publish(10)
    wait_until(
        lambda: sum(isolated.end_offsets(isolated.topics.telemetry_raw).values()) >= len(sent) + 1,
        60,
        "every reading in Kafka",
    )
    assert {(r["device_id"], r["seq"]) for r in real_readings(isolated, len(sent) + 1)} == set(sent)


def test_scaling_down_strands_nothing_in_the_removed_workers_sessions(isolated: Isolated) -> None:
    two = isolated.start("gateway-2", "gateway", "--workers", "2")
    with isolated.mqtt_client() as client:
        isolated.await_gateway(client)
        two.send_signal(signal.SIGTERM)
        assert two.wait(60) == 0
        # both workers' sessions are offline but alive: the broker deals each half of these
        sent = [(f"s{i}", seq) for i in range(4) for seq in range(25)]
        for device, seq in sent:
            client.publish(
                f"{isolated.mqtt_root}/{device}/telemetry", payload(seq), qos=1
            ).wait_for_publish(10)
    isolated.start("gateway-1", "gateway", "--workers", "1")  # retires worker 1, draining it
    wait_until(
        lambda: readings_now(isolated) >= set(sent),
        90,
        "every reading, including those queued for the removed worker",
    )


def test_a_record_kafka_refuses_is_dead_lettered_and_its_message_acknowledged(
    isolated: Isolated,
) -> None:
    """The test's telemetry topic takes records of at most 1,500 bytes; a reading of many
    metrics makes a larger record, which Kafka refuses for good (MSG_SIZE_TOO_LARGE). It goes
    to the dead letters with the reason, its MQTT message is acknowledged (a gateway started
    again is not handed it a second time), and the readings after it flow."""
    admin = AdminClient(client_config(isolated.settings.kafka))
    resource = ConfigResource(
        ResourceType.TOPIC,
        isolated.topics.telemetry_raw,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "1500", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    t = now_ms()
    rng = random.Random(7)  # names and values that compress poorly (the producer uses lz4)
    metrics = {f"m{rng.getrandbits(120):030x}": rng.random() for _ in range(60)}
    wide = reading_payload(1, t - 5, t, metrics)
    gateway = isolated.start("gateway", "gateway")
    with isolated.mqtt_client() as client:
        isolated.await_gateway(client)
        client.publish(f"{isolated.mqtt_root}/wide/telemetry", wide, qos=1).wait_for_publish(10)
        (dead,) = isolated.read_all(isolated.topics.telemetry_deadletter, 1)
        reason = dead.headers["fw.reason"].decode()
        assert reason.startswith(f"Kafka refused the record for {isolated.topics.telemetry_raw}")
        assert dead.headers["fw.source_topic"] == isolated.topics.telemetry_raw.encode()
        assert json.loads(dead.value)["device_id"] == "wide"
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(60) == 0
        isolated.start("gateway-again", "gateway")  # the same persistent session
        for seq in range(5):
            client.publish(
                f"{isolated.mqtt_root}/after/telemetry", payload(seq), qos=1
            ).wait_for_publish(10)
    wait_until(
        lambda: (
            {seq for device, seq in readings_now(isolated) if device == "after"} == set(range(5))
        ),
        60,
        "the readings after the refused one",
    )
    again = isolated.read_all(isolated.topics.telemetry_deadletter, 2, timeout_s=5)
    assert len(again) == 1, "the refused message was acknowledged: not delivered again"
