"""Publishing simulated readings over MQTT, paced in real time."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.contracts.settings import MqttSettings
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.simulator.fleet import SimReading

logger = logging.getLogger(__name__)


class SimulatorError(FleetwatchError):
    pass


@dataclass
class PublishStats:
    sent: int = 0
    spikes: int = 0


def connect(mqtt_settings: MqttSettings, client_id: str) -> mqtt.Client:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    client.max_inflight_messages_set(1000)
    if mqtt_settings.username:
        client.username_pw_set(mqtt_settings.username, mqtt_settings.password)
    try:
        client.connect(mqtt_settings.host, mqtt_settings.port, keepalive=mqtt_settings.keepalive_s)
    except OSError as exc:
        raise SimulatorError(
            f"cannot reach MQTT at {mqtt_settings.host}:{mqtt_settings.port}: {exc}"
        ) from exc
    client.loop_start()
    return client


def publish(
    client: mqtt.Client,
    mqtt_settings: MqttSettings,
    stream: Iterable[SimReading],
    qos: int,
    interval_ms: int,
    stop: threading.Event,
    truth: IO[str] | None = None,
) -> PublishStats:
    """Publish each reading when its event time comes (relative to the first one)."""
    stats = PublishStats()
    started = time.monotonic()
    first_ts: int | None = None
    pending: list[mqtt.MQTTMessageInfo] = []
    for reading in stream:
        if stop.is_set():
            break
        first_ts = reading.ts if first_ts is None else first_ts
        due = started + (reading.ts - first_ts) / 1000
        if (delay := due - time.monotonic()) > 0 and stop.wait(delay):
            break
        sent = time.time_ns() // 1_000_000
        payload = reading_payload(reading.seq, reading.ts, sent, reading.metrics)
        info = client.publish(mqtt_settings.telemetry_topic(reading.device_id), payload, qos=qos)
        if qos > 0:
            pending.append(info)
        stats.sent += 1
        if reading.spike:
            stats.spikes += 1
            if truth is not None:
                record = {
                    "device_id": reading.device_id,
                    "metric": "temperature",
                    "kind": "spike",
                    "seq": reading.seq,
                    "start_ms": reading.ts,
                    "end_ms": reading.ts,
                }
                truth.write(json.dumps(record) + "\n")
                truth.flush()
        if len(pending) > 10_000:
            pending = [p for p in pending if not p.is_published()]
    for info in pending:
        info.wait_for_publish(timeout=30)
    return stats


def open_truth(path: Path | None) -> IO[str] | None:
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a")
