"""Nothing accepted at QoS 1 is lost: the gateway is killed with SIGKILL while readings the MQTT
broker has accepted are not yet in Kafka, and the Kafka broker is killed with SIGKILL and
started again while a device fleet keeps publishing. Every (device, seq) the MQTT broker
acknowledged must be in ``telemetry.raw`` (duplicates are allowed: the log is at-least-once).

Runs on a private stack (own ports and run dir), since it kills the broker.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.kafka_config import client_config
from fleetwatch.kafka_topic import end_offsets
from fleetwatch.stack.kafka import KafkaBroker
from fleetwatch.stack.processes import wait_for
from tests.integration.acked_fleet import AckedFleet, Message
from tests.integration.private_stack import Private, private_stack
from tests.integration.processes import gone
from tests.polling import wait_until

logger = logging.getLogger(__name__)

DEVICES, PER_DEVICE, RATE = 5, 2400, 400.0  # 12,000 readings over about 30 s
KILL_ATTEMPTS = 3
"""Gateway kills tried until one lands while accepted readings are not yet in Kafka."""

Pair = tuple[str, int]


@pytest.fixture
def private(stack_settings: Settings, tmp_path: Path) -> Iterator[Private]:
    extra = {
        "FLEETWATCH_GATEWAY__METRICS_PORT": "0",
        # five devices publish 80 messages a second each, under this rate; the backlogs
        # after each kill arrive far faster, and count at the pace they were published
        "FLEETWATCH_GATEWAY__DEVICE_RATE": "100",
    }
    with private_stack(tmp_path / "run", extra) as stack:
        yield stack


def start_gateway(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "fleetwatch.cli.main", "gateway"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )


def subscriptions(log: Path) -> int:
    """How many times a gateway of this test has subscribed (one line per connection)."""
    return log.read_text().count("subscribed to")


def raw_contents(settings: Settings) -> tuple[set[Pair], dict[int, int]]:
    """Every (device, seq) in ``telemetry.raw`` up to its end offsets, and those offsets."""
    topic = settings.topics.telemetry_raw
    consumer = Consumer(
        client_config(
            settings.kafka,
            {
                "group.id": f"check-{time.monotonic_ns()}",
                "enable.auto.commit": False,
            },
        )
    )
    pairs: set[Pair] = set()
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        left = {p: end for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + 60
        while left:
            assert time.monotonic() < deadline, f"could not read {topic} to {ends}"
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is None:
                    record = json.loads(msg.value() or b"{}")
                    pairs.add((record["device_id"], record["seq"]))
                    if (msg.offset() or 0) + 1 >= left.get(msg.partition(), -1):
                        left.pop(msg.partition(), None)
    finally:
        consumer.close()
    return pairs, ends


def reading_at(seq: int, now_ms: int) -> bytes:
    return reading_payload(seq, now_ms, now_ms, {"t": 20.0})


def fleet_messages(settings: Settings) -> list[Message]:
    """DEVICES devices, PER_DEVICE readings each, round by round; tagged by (device, seq)."""
    return [
        (
            (f"n{d}", seq),
            settings.mqtt.telemetry_topic(f"n{d}"),
            partial(reading_at, seq),
        )
        for seq in range(PER_DEVICE)
        for d in range(DEVICES)
    ]


def kill_on_a_fresh_acknowledgement(fleet: AckedFleet, gateway: subprocess.Popen[bytes]) -> int:
    """SIGKILL the gateway the moment the broker has acknowledged another reading (which the
    gateway cannot have in Kafka yet); returns how many readings were acknowledged by then."""
    seen = fleet.acknowledged()
    acked = wait_until(
        lambda: (n := fleet.acknowledged()) > seen and n, 10, "a new acknowledgement", 0.001
    )
    gateway.send_signal(signal.SIGKILL)  # no flush, no goodbye
    gateway.wait(10)
    return acked


def test_sigkill_of_the_gateway_and_of_the_kafka_broker_lose_nothing(
    private: Private, tmp_path: Path
) -> None:
    settings, env = private
    log = tmp_path / "gateway.log"
    gateways = [start_gateway(env, log)]
    fleet = AckedFleet(settings, fleet_messages(settings), RATE, "noloss-fleet")
    try:
        wait_until(lambda: subscriptions(log) == 1, 30, "the gateway to subscribe")
        fleet.start()
        total = DEVICES * PER_DEVICE
        wait_until(lambda: fleet.acknowledged() >= total // 10, 30, "a tenth of the readings")

        # 1. the gateway dies while readings the MQTT broker accepted are not in Kafka
        stranded: set[Pair] = set()
        for attempt in range(1, KILL_ATTEMPTS + 1):
            acked = kill_on_a_fresh_acknowledgement(fleet, gateways[-1])
            on_kafka, ends = raw_contents(settings)
            assert end_offsets(settings.kafka, settings.topics.telemetry_raw) == ends, (
                "the killed gateway wrote after the read"
            )
            stranded = fleet.tags(acked) - on_kafka
            logger.info(
                "gateway kill %d: %d readings accepted, %d in Kafka, %d stranded",
                attempt,
                acked,
                len(on_kafka & fleet.tags(acked)),
                len(stranded),
            )
            assert fleet.acknowledged() > acked, "the fleet published on across the kill"
            gateways.append(start_gateway(env, log))  # same client id: its session waits
            wait_until(lambda: subscriptions(log) == len(gateways), 30, "the gateway back")
            if stranded:
                break
        assert stranded, f"none of {KILL_ATTEMPTS} kills found accepted readings outside Kafka"

        # 2. the Kafka broker dies (SIGKILL) while the fleet publishes, and comes back
        wait_until(lambda: fleet.acknowledged() >= total // 2, 60, "half of the readings")
        broker = KafkaBroker(settings)
        pid = broker.proc.pid()
        assert pid is not None
        accepted_before = fleet.acknowledged()
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: gone(pid), 30, "the Kafka broker to die")
        assert broker.start()
        broker.wait_ready()
        accepted_during = fleet.acknowledged() - accepted_before
        logger.info("%d readings accepted while Kafka was down", accepted_during)
        assert accepted_during > 0, "the fleet published while Kafka was down"

        fleet.join(180)
        assert not fleet.is_alive()
        assert len(fleet.published) == total, "the MQTT broker must have acknowledged every publish"
        final: set[Pair] = set()

        def every_accepted_reading_in_kafka() -> bool:
            nonlocal final
            try:
                final = raw_contents(settings)[0]
            except KafkaException:  # the restarted broker has not elected every leader yet
                return False
            return fleet.published <= final

        wait_for(every_accepted_reading_in_kafka, 180, 1.0)
        lost = fleet.published - final
        assert not lost, f"{len(lost)} accepted readings not in Kafka, e.g. {sorted(lost)[:5]}"
        assert stranded <= final, "the readings stranded by the kill reached Kafka"

        gateways[-1].send_signal(signal.SIGTERM)
        assert gateways[-1].wait(60) == 0
    finally:
        for proc in gateways:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        fleet.join(60)
