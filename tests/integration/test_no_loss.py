"""Nothing accepted at QoS 1 is lost: the gateway is killed with SIGKILL mid-run, and the Kafka
broker is restarted mid-run, while a device keeps publishing. Every (device, seq) it published
must be in ``telemetry.raw`` (duplicates are allowed: the log is at-least-once).

Runs on a private stack (own ports and run dir), since it restarts the broker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from confluent_kafka import Consumer
from paho.mqtt.enums import CallbackAPIVersion

from fleetwatch.contracts.settings import KafkaSettings, MqttSettings, Settings
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.stack.kafka import KafkaBroker
from fleetwatch.stack.manager import Stack
from tests.integration.conftest import free_port
from tests.polling import wait_until

DEVICES, PER_DEVICE, RATE = 5, 400, 400.0  # 2,000 readings over about 5 s


@pytest.fixture
def private_stack(
    stack_settings: Settings, tmp_path: Path
) -> Iterator[tuple[Settings, dict[str, str]]]:
    kafka_port, mqtt_port = free_port(), free_port()
    settings = Settings(
        run_dir=tmp_path / "run",
        kafka=KafkaSettings(
            port=kafka_port,
            controller_port=free_port(),
            bootstrap_servers=f"127.0.0.1:{kafka_port}",
        ),
        mqtt=MqttSettings(port=mqtt_port),
    )
    env = dict(os.environ)
    env.update(
        {
            "FLEETWATCH_RUN_DIR": str(settings.run_path),
            "FLEETWATCH_KAFKA__PORT": str(kafka_port),
            "FLEETWATCH_KAFKA__CONTROLLER_PORT": str(settings.kafka.controller_port),
            "FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
            "FLEETWATCH_MQTT__PORT": str(mqtt_port),
        }
    )
    stack = Stack(settings)
    stack.up()
    try:
        yield settings, env
    finally:
        stack.down()


def start_gateway(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "fleetwatch.cli.main", "gateway"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )


def raw_pairs(settings: Settings) -> set[tuple[str, int]]:
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka.bootstrap_servers,
            "group.id": f"check-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([settings.topics.telemetry_raw])
    pairs: set[tuple[str, int]] = set()
    idle = 0
    try:
        while idle < 3:
            batch = consumer.consume(1000, timeout=1.0)
            idle = 0 if batch else idle + 1
            for msg in batch:
                if msg.error() is None:
                    record = json.loads(msg.value() or b"{}")
                    pairs.add((record["device_id"], record["seq"]))
    finally:
        consumer.close()
    return pairs


class Publisher(threading.Thread):
    """A device fleet publishing at QoS 1; `published` holds what the broker acknowledged."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.published: set[tuple[str, int]] = set()
        self.progress = 0

    def run(self) -> None:
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id="noloss-fleet", protocol=mqtt.MQTTv5
        )
        client.max_inflight_messages_set(100)
        client.connect(self.settings.mqtt.host, self.settings.mqtt.port)
        client.loop_start()
        pending = []
        start = time.monotonic()
        for seq in range(PER_DEVICE):
            for d in range(DEVICES):
                now = time.time_ns() // 1_000_000
                device = f"n{d}"
                info = client.publish(
                    self.settings.mqtt.telemetry_topic(device),
                    reading_payload(seq, now, now, {"t": 20.0}),
                    qos=1,
                )
                pending.append(((device, seq), info))
                self.progress += 1
            time.sleep(max(0.0, start + (seq + 1) * DEVICES / RATE - time.monotonic()))  # pacing
        for pair, info in pending:
            info.wait_for_publish(30)
            if info.is_published():
                self.published.add(pair)
        client.disconnect()
        client.loop_stop()


def test_sigkill_of_the_gateway_and_a_broker_restart_lose_nothing(
    private_stack: tuple[Settings, dict[str, str]], tmp_path: Path
) -> None:
    settings, env = private_stack
    log = tmp_path / "gateway.log"
    gateways = [start_gateway(env, log)]
    try:
        wait_until(lambda: "subscribed to" in log.read_text(), 30, "the gateway to subscribe")
        fleet = Publisher(settings)
        fleet.start()
        total = DEVICES * PER_DEVICE
        wait_until(lambda: fleet.progress >= total // 4, 30, "a quarter of the readings")
        gateways[0].send_signal(signal.SIGKILL)  # no flush, no goodbye
        gateways[0].wait(10)
        gateways.append(start_gateway(env, log))  # same client id: its persistent session waits

        wait_until(lambda: fleet.progress >= total // 2, 30, "half of the readings")
        broker = KafkaBroker(settings)
        broker.proc.stop()
        broker.start()
        broker.wait_ready()

        fleet.join(120)
        assert len(fleet.published) == total, "the MQTT broker must have acknowledged every publish"
        wait_until(
            lambda: fleet.published <= raw_pairs(settings),
            120,
            "every acknowledged reading in Kafka",
        )

        gateways[-1].send_signal(signal.SIGTERM)
        assert gateways[-1].wait(60) == 0
    finally:
        for proc in gateways:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
