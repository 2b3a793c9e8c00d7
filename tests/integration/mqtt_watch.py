"""A test-side MQTT client that records what it receives (its network thread is joined on close)."""

from __future__ import annotations

import json
import threading
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from fleetwatch.contracts.settings import MqttSettings
from fleetwatch.mqtt_config import configure


class Watcher:
    def __init__(self, settings: MqttSettings, topics: list[str]) -> None:
        """Subscribed to ``topics`` on the broker of ``settings``, with its login and TLS."""
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self.subscribed = threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        configure(self.client, settings)
        self.client.on_connect = lambda c, *_: c.subscribe([(t, 1) for t in topics])
        self.client.on_subscribe = lambda *_: self.subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect(settings.host, settings.port)
        self.client.loop_start()

    def _on_message(self, _c: object, _u: object, msg: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.messages.append((msg.topic, json.loads(msg.payload)))

    def on(self, suffix: str) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            return [(t, m) for t, m in self.messages if t.endswith(suffix)]

    def publish(self, topic: str, payload: bytes) -> None:
        self.client.publish(topic, payload, qos=1).wait_for_publish(10)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
