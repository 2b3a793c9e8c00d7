"""On the real stack: the broker bounds what one message can cost. A message over the gateway's
payload limit times ``BROKER_PAYLOAD_FACTOR`` never passes Mosquitto: it tells MQTT v5 clients
the limit when they connect, disconnects a publisher that goes over it with reason "packet too
large" (and says so in its log), and nothing of it reaches the gateway. Other publishers go on
as usual, and a payload between the two limits still reaches the gateway, which dead-letters it
with its device and reason."""

from __future__ import annotations

import threading
import time
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode

from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.stack.mosquitto import max_packet_size
from tests.integration.conftest import Isolated, login_as
from tests.integration.topic_reads import read, stable_end
from tests.polling import wait_until

PACKET_TOO_LARGE = 0x95
UNSPECIFIED = 0x80


def _padded(size: int) -> bytes:
    head = b'{"seq":1,"metrics":{"t":1},"pad":"'
    return head + b"x" * (size - len(head) - 2) + b'"}'


def test_a_message_beyond_the_brokers_limit_is_refused_at_the_door(isolated: Isolated) -> None:
    limit = isolated.settings.gateway.max_payload_bytes
    root = isolated.mqtt_root
    big, other = f"big{isolated.tag}", f"other{isolated.tag}"
    told: dict[str, Any] = {}
    dropped = threading.Event()

    def on_connect(_c: mqtt.Client, _u: object, _f: object, _r: ReasonCode, props: Any) -> None:
        told["max_packet"] = getattr(props, "MaximumPacketSize", None)

    def on_disconnect(
        _c: mqtt.Client, _u: object, _f: object, reason: ReasonCode, _p: object
    ) -> None:
        told.setdefault("reason", reason.value)  # the first: paho reconnects and resends
        dropped.set()

    isolated.start("gateway", "gateway")
    with isolated.mqtt_client() as client:
        isolated.await_gateway(client)
        offender = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=big, protocol=mqtt.MQTTv5)
        login_as(offender, isolated.settings, "sim")
        offender.on_connect, offender.on_disconnect = on_connect, on_disconnect
        offender.connect(isolated.settings.mqtt.host, isolated.settings.mqtt.services_port)
        offender.loop_start()
        try:
            wait_until(lambda: "max_packet" in told, 10, "the broker's CONNACK")
            offender.publish(
                f"{root}/{big}/telemetry", _padded(max_packet_size(isolated.settings) + 1), qos=1
            )
            assert dropped.wait(10), "the broker let a message over its limit through"
        finally:
            offender.disconnect()
            offender.loop_stop()
        assert told["max_packet"] == max_packet_size(isolated.settings)
        # the client reads the broker's DISCONNECT (0x95) unless its own write of the rest of the
        # packet fails first (then paho reports 0x80); the broker's log says why either way
        assert told["reason"] in (PACKET_TOO_LARGE, UNSPECIFIED), told
        broker_log = isolated.settings.run_path / "logs" / "mosquitto.log"
        wait_until(
            lambda: f"Client {big} disconnected due to oversize packet" in broker_log.read_text(),
            10,
            "the broker to log why it disconnected the publisher",
        )

        topic = f"{root}/{other}/telemetry"
        client.publish(topic, _padded(2 * limit), qos=1).wait_for_publish(10)
        now = time.time_ns() // 1_000_000
        client.publish(topic, reading_payload(2, now, now, {"t": 21.0}), qos=1).wait_for_publish(10)

    def arrived() -> bool:
        return any(r.key == other.encode() for r in read(isolated, isolated.topics.telemetry_raw))

    wait_until(arrived, 30, "the other device's reading to reach Kafka")
    stable_end(isolated, isolated.topics.telemetry_deadletter)
    dead = read(isolated, isolated.topics.telemetry_deadletter)
    assert not [r for r in dead if r.key == big.encode()], "nothing of it reached the gateway"
    between = [r for r in dead if r.key == other.encode()]
    assert len(between) == 1, "a payload between the limits is the gateway's to dead-letter"
    assert b"exceeds the" in between[0].headers["fw.reason"]
