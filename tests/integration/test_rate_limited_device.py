"""On the real stack: a device that keeps exceeding its rate is reported. The gateway
dead-letters its messages over the rate (``fw.kind: rate_limited``) and counts it among the
devices over their rate; the API reads those dead letters and ``GET /devices/{id}`` says the
device is being rate-limited, while a device at its pace is not. And the scorer's tombstones on
``device.state`` and ``device.sessions`` delete a forgotten device's rows from the API's store."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from fleetwatch.contracts.devices import DeviceSession, DeviceState, session_id
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.kafka_config import client_config
from tests.integration.api_stack import admin_key, produce, start_api
from tests.integration.conftest import Isolated
from tests.integration.test_metrics import scraped, value
from tests.polling import wait_until

KIND = {"reason": "rate_limited"}


def test_a_device_over_its_rate_shows_in_its_status_and_the_gateways_gauge(
    isolated: Isolated,
) -> None:
    isolated.env["FLEETWATCH_GATEWAY__DEVICE_RATE"] = "1"
    isolated.env["FLEETWATCH_GATEWAY__DEVICE_BURST"] = "5"
    isolated.start("gateway", "gateway")
    api = start_api(isolated, admin_key(Path(isolated.env["FLEETWATCH_RUN_DIR"])))
    root = isolated.mqtt_root
    with isolated.mqtt_client() as client:
        isolated.await_gateway(client)
        now = time.time_ns() // 1_000_000
        for seq in range(40):  # 40 at once: its burst of 5 goes through, the rest do not
            body = reading_payload(seq, now, now, {"temperature": 21.0})
            client.publish(f"{root}/rl-flood/telemetry", body, qos=1).wait_for_publish(10)
        body = reading_payload(0, now, now, {"temperature": 21.0})
        client.publish(f"{root}/rl-calm/telemetry", body, qos=1).wait_for_publish(10)

        port = isolated.metrics_ports["gateway"]
        wait_until(
            scraped(port, lambda s: value(s, "fleetwatch_gateway_rate_limited_devices") == 1),
            30,
            "the gateway's gauge of devices over their rate",
        )

        def limited() -> dict[str, Any] | None:
            """The device's run once it has every dead letter the gateway counted."""
            response = api.get("/devices/rl-flood")
            if response.status_code != 200:
                return None
            run: dict[str, Any] | None = response.json()["rate_limited"]
            dead = value(scraped(port, bool)(), "fleetwatch_gateway_dead_lettered_total", **KIND)
            return run if run is not None and run["dead_letters"] == dead >= 30 else None

        run = wait_until(limited, 60, "the API to show the device rate-limited")
        assert run is not None
        assert run["recently"] is True
        assert now - 5_000 <= run["since_ms"] <= run["last_ms"]
        wait_until(lambda: api.get("/devices/rl-calm").status_code == 200, 30, "the calm one")
        assert api.get("/devices/rl-calm").json()["rate_limited"] is None


def test_the_scorers_tombstones_delete_a_forgotten_devices_rows(isolated: Isolated) -> None:
    t = isolated.topics
    device, other = f"gone{isolated.tag}", f"kept{isolated.tag}"
    states, sessions = [], []
    for d in (device, other):
        sid = session_id(d, 1_000)
        states.append((d, _state(d, sid).model_dump_json().encode()))
        sessions.append((sid, _session(d, sid).model_dump_json().encode()))
    produce(isolated, t.device_state, states)
    produce(isolated, t.device_sessions, sessions)
    api = start_api(isolated, admin_key(Path(isolated.env["FLEETWATCH_RUN_DIR"])))

    def held(d: str) -> tuple[str, int]:
        response = api.get(f"/devices/{d}")
        if response.status_code != 200:
            return ("none", 0)
        count = api.get(f"/devices/{d}/sessions").json()["count"]
        return (response.json()["status"], count)

    wait_until(lambda: held(device) == held(other) == ("silent", 1), 30, "both materialised")
    producer = Producer(client_config(isolated.settings.kafka))
    for topic in (t.device_state, t.device_sessions):
        producer.produce(topic, key=device.encode(), value=None)  # as the scorer writes them
    assert producer.flush(30) == 0
    wait_until(lambda: held(device) == ("unknown", 0), 30, "the tombstones to delete its rows")
    assert held(other) == ("silent", 1)


def _state(device: str, sid: str) -> DeviceState:
    return DeviceState.model_validate(
        {
            "device_id": device,
            "status": "silent",
            "last_seen_ms": 5_000,
            "last_received_ms": 5_010,
            "last_seq": 5,
            "last_values": {"temperature": 21.0},
            "open_alerts": [],
            "params_version": 0,
            "clock_offset_ms": 0,
            "session_id": sid,
            "updated_ms": 5_100,
        }
    )


def _session(device: str, sid: str) -> DeviceSession:
    return DeviceSession(
        session_id=sid,
        device_id=device,
        start_ms=1_000,
        end_ms=5_000,
        readings=5,
        first_seq=1,
        last_seq=5,
        end_reason="gap",
    )
