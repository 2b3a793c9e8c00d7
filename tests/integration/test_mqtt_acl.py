"""With the example ACL, a device can publish only as itself: the broker refuses a device that
writes to another device's topic, so the device id in a telemetry topic is the authenticated one."""

from __future__ import annotations

import threading
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from fleetwatch.contracts.telemetry import reading_payload
from tests.integration.secure_broker import ACL_EXAMPLE, secure_broker
from tests.polling import wait_until

ACCOUNTS = {"acl-0000": "pw-a", "acl-0001": "pw-b", "fleetwatch-gateway": "pw-gw"}


def client(port: int, user: str) -> mqtt.Client:
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"{user}-c", protocol=mqtt.MQTTv5)
    c.username_pw_set(user, ACCOUNTS[user])
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def test_a_device_cannot_publish_as_another(tmp_path: Path) -> None:
    with secure_broker(tmp_path, ACCOUNTS, acl=ACL_EXAMPLE) as port:
        seen: list[str] = []
        subscribed = threading.Event()
        gateway = client(port, "fleetwatch-gateway")
        gateway.on_message = lambda c, u, msg: seen.append(msg.topic)
        gateway.on_subscribe = lambda *args: subscribed.set()
        gateway.subscribe("devices/+/telemetry", qos=1)
        wait_until(subscribed.is_set, 10, "the gateway's subscription")

        results: dict[int, bool] = {}
        device = client(port, "acl-0000")
        device.on_publish = lambda c, u, mid, reason, props: results.__setitem__(
            mid, reason.is_failure
        )
        forged = device.publish(
            "devices/acl-0001/telemetry", reading_payload(1, 1, 1, {"t": 1.0}), qos=1
        )
        own = device.publish(
            "devices/acl-0000/telemetry", reading_payload(1, 1, 1, {"t": 1.0}), qos=1
        )
        wait_until(lambda: own.mid in results and forged.mid in results, 10, "both PUBACKs")
        # messages of one connection arrive in order: the forged one would come before this one
        wait_until(lambda: "devices/acl-0000/telemetry" in seen, 10, "the device's own reading")

        assert results[forged.mid] is True, (
            "the broker must refuse a write to another device's topic"
        )
        assert results[own.mid] is False
        assert seen == ["devices/acl-0000/telemetry"]
        for c in (device, gateway):
            c.disconnect()
            c.loop_stop()
