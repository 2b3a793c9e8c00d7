"""The gateway over the real brokers: good readings to telemetry.raw, bad ones to dead letters."""

from __future__ import annotations

import json

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from fleetwatch.contracts.telemetry import reading_payload
from tests.integration.conftest import Isolated
from tests.polling import wait_until

HOT = b'{"v":1,"seq":1,"ts":1,"sent":1,"metrics":{"t":"hot"}}'


def test_good_readings_reach_kafka_and_bad_ones_the_dead_letters_with_a_reason(
    isolated: Isolated,
) -> None:
    isolated.start("gateway", "gateway")
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id=f"t-{isolated.tag}", protocol=mqtt.MQTTv5
    )
    client.connect(isolated.settings.mqtt.host, isolated.settings.mqtt.port)
    client.loop_start()
    try:
        # the gateway's shared subscription exists once a probe reading gets through
        probe_topic = f"{isolated.mqtt_root}/probe/telemetry"

        def probe_arrived() -> bool:
            client.publish(
                probe_topic, reading_payload(0, 1, 1, {"t": 1.0}), qos=1
            ).wait_for_publish(10)
            return sum(isolated.end_offsets(isolated.topics.telemetry_raw).values()) >= 1

        wait_until(probe_arrived, 30, "the gateway to subscribe", interval_s=0.5)
        good = [(f"d{i}", seq) for i in range(3) for seq in range(5)]
        for device, seq in good:
            payload = reading_payload(
                seq, 1_700_000_000_000 + seq, 1_700_000_000_001 + seq, {"t": 20.0 + seq}
            )
            client.publish(
                f"{isolated.mqtt_root}/{device}/telemetry", payload, qos=1
            ).wait_for_publish(10)
        bad = {
            f"{isolated.mqtt_root}/d0/telemetry": b"{not json",
            f"{isolated.mqtt_root}/d1/telemetry": HOT,
            f"{isolated.mqtt_root}/d2/telemetry": b"",
        }
        for topic, payload in bad.items():
            client.publish(topic, payload, qos=1).wait_for_publish(10)
    finally:
        client.disconnect()
        client.loop_stop()

    raw = isolated.read_all(isolated.topics.telemetry_raw, len(good) + 1)
    records = [json.loads(r.value) for r in raw]
    seen = sorted((r["device_id"], r["seq"]) for r in records if r["device_id"] != "probe")
    assert seen == sorted(good)
    assert all(r.key == json.loads(r.value)["device_id"].encode() for r in raw)

    dead = isolated.read_all(isolated.topics.telemetry_deadletter, len(bad))
    reasons = {
        r.headers["fw.mqtt_topic"].decode(): (r.value, r.headers["fw.reason"].decode())
        for r in dead
    }
    assert set(reasons) == set(bad)
    for topic, payload in bad.items():
        assert reasons[topic][0] == payload
    assert reasons[f"{isolated.mqtt_root}/d0/telemetry"][1].startswith("payload: Invalid JSON")
    assert reasons[f"{isolated.mqtt_root}/d1/telemetry"][1].startswith("metrics.t")
    assert reasons[f"{isolated.mqtt_root}/d2/telemetry"][1] == "empty payload"
