"""Per-device credentials on the stack's own broker, which refuses anonymous clients:
``fleetwatch devices add`` lets a device in, as itself only (it cannot publish as another
device or read another's commands), ``rotate`` retires its old password and ``revoke`` shuts
it out — each taken by the running broker without a restart."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

from fleetwatch.contracts.telemetry import reading_payload
from tests.integration.conftest import Isolated, connect, fleetwatch
from tests.polling import wait_until


def issue(isolated: Isolated, verb: str, device: str) -> dict[str, Any]:
    result = fleetwatch("devices", verb, device, "--json", env=isolated.stack_env)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_issued_credentials_let_a_device_in_as_itself_only(isolated: Isolated) -> None:
    device, other = f"cred-{isolated.tag}", f"other-{isolated.tag}"
    assert connect(isolated, None, "")[0] is False  # anonymous clients are refused
    issued = issue(isolated, "add", device)
    ok, client = connect(isolated, device, issued["password"])
    assert ok
    assert connect(isolated, device, "not-the-password")[0] is False

    results: dict[int, bool] = {}
    subscribed = threading.Event()
    received: list[str] = []
    client.on_publish = lambda c, u, mid, reason, props: results.__setitem__(mid, reason.is_failure)
    client.on_subscribe = lambda *args: subscribed.set()
    client.on_message = lambda c, u, msg: received.append(msg.topic)
    root = isolated.settings.mqtt.root
    forged = client.publish(f"{root}/{other}/telemetry", reading_payload(1, 1, 1, {"t": 1.0}), 1)
    own = client.publish(f"{root}/{device}/telemetry", reading_payload(1, 1, 1, {"t": 1.0}), 1)
    client.subscribe([(f"{root}/{other}/commands", 1), (f"{root}/{device}/commands", 1)])
    wait_until(lambda: len(results) == 2 and subscribed.is_set(), 10, "the broker's answers")
    assert results[forged.mid] is True  # not authorised
    assert results[own.mid] is False
    # the broker takes the subscription but delivers only what the ACL lets it read: the
    # gateway's command to the other device never arrives, the one to this device does
    with isolated.mqtt_client("gateway") as gateway:
        gateway.publish(f"{root}/{other}/commands", b"{}", qos=1).wait_for_publish(10)
        gateway.publish(f"{root}/{device}/commands", b"{}", qos=1).wait_for_publish(10)
    wait_until(lambda: received, 10, "the device's own command")
    assert received == [f"{root}/{device}/commands"]
    client.disconnect()
    client.loop_stop()

    listed = fleetwatch("devices", "list", env=isolated.stack_env)
    assert device in listed.stdout.split()
    rotated = issue(isolated, "rotate", device)
    assert connect(isolated, device, issued["password"])[0] is False
    ok, client = connect(isolated, device, rotated["password"])
    assert ok
    client.disconnect()
    client.loop_stop()

    revoked = fleetwatch("devices", "revoke", device, env=isolated.stack_env)
    assert revoked.returncode == 0, revoked.stderr
    assert "the running broker has it now" in revoked.stdout
    assert connect(isolated, device, rotated["password"])[0] is False


def test_a_device_presenting_the_gateway_s_client_id_takes_nothing_from_it(
    isolated: Isolated,
) -> None:
    """On the devices' listener a login's client id is its username, so a device presenting
    the gateway's id gets a session of its own; on the stages' listener, where the gateway
    logs in, a device's account is refused. The gateway never loses its connection."""
    isolated.start("gateway", "gateway")
    with isolated.mqtt_client() as probe:
        isolated.await_gateway(probe)
    device = f"thief-{isolated.tag}"
    issued = issue(isolated, "add", device)
    gateway_id = isolated.env["FLEETWATCH_GATEWAY__CLIENT_ID"]
    root = isolated.mqtt_root  # the gateway's
    before = sum(isolated.end_offsets(isolated.topics.telemetry_raw).values())
    for n, client_id in enumerate((gateway_id, f"{gateway_id}-0"), start=1):
        services = isolated.settings.mqtt.services_port
        assert connect(isolated, device, issued["password"], client_id, services)[0] is False
        ok, thief = connect(isolated, device, issued["password"], client_id)
        assert ok
        for seq in range(10):  # the device's own session works
            now = time.time_ns() // 1_000_000
            payload = reading_payload(n * 100 + seq, now, now, {"t": 1.0})
            thief.publish(f"{root}/{device}/telemetry", payload, qos=1).wait_for_publish(10)
        thief.disconnect()
        thief.loop_stop()
    wait_until(
        lambda: sum(isolated.end_offsets(isolated.topics.telemetry_raw).values()) >= before + 20,
        30,
        "the device's readings through the gateway",
    )
    port = isolated.metrics_ports["gateway"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    assert "fleetwatch_gateway_mqtt_reconnects_total 0.0" in metrics
