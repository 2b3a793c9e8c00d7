"""MQTT I/O for the simulator: connections that the publishing loop drives itself.

No network thread: the publishing loop is the connection's event loop. A publish is queued, and
what a burst queued is written together (:meth:`Connection.flush`, one ``send`` for many:
:class:`~fleetwatch.ingest.mqtt_client.BufferedClient`); the worker calls :meth:`Links.service`
between ticks to write what is queued, read acknowledgements and commands, and keep the
connection alive. One shared connection carries many devices; when the broker
requires credentials, every device gets its own connection with its own username and password.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode

from fleetwatch.contracts.settings import MqttSettings
from fleetwatch.ingest.mqtt_client import BufferedClient
from fleetwatch.mqtt_config import configure, connect_failure
from fleetwatch.simulator.errors import SimulatorError

logger = logging.getLogger(__name__)

OnMessage = Callable[[str, bytes], None]
MAX_DEVICE_CONNECTIONS = 2000


def _write_later(_client: object, _userdata: object, _sock: object) -> None:
    """Told that packets wait to be written: the publishing loop writes them."""


class Connection:
    """One MQTT connection (MQTT 3.1.1), connected on construction with the login and TLS of
    ``settings``."""

    def __init__(
        self,
        settings: MqttSettings,
        client_id: str,
        on_message: OnMessage,
        timeout_s: float = 10.0,
        track_acks: bool = True,
    ) -> None:
        self.client = BufferedClient(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311
        )
        # paho writes a packet as it is queued unless an event loop asks to be told instead;
        # this one writes in flush() and service().
        self.client.on_socket_register_write = _write_later
        # No in-flight limit in paho: with one, every acknowledgement walks every unacknowledged
        # message (paho's _update_inflight). The broker takes what it is sent.
        self.client.max_inflight_messages_set(0)
        self.client.max_queued_messages_set(0)
        self.published_qos1 = 0
        self.acked = 0
        self.errors = 0
        self._connack: ReasonCode | None = None
        self.client.on_connect = self._on_connect
        if track_acks:  # paho builds callback arguments per message: skip them at QoS 0
            self.client.on_publish = self._on_publish
        self.client.on_message = lambda _c, _u, msg: on_message(msg.topic, bytes(msg.payload))
        configure(self.client, settings)
        where = f"{settings.host}:{settings.port}"
        try:
            self.client.connect(settings.host, settings.port, keepalive=settings.keepalive_s)
        except OSError as exc:
            raise SimulatorError(connect_failure(exc, settings)) from exc
        deadline = time.monotonic() + timeout_s
        while self._connack is None and time.monotonic() < deadline:
            if self.client.loop(timeout=0.1) != mqtt.MQTT_ERR_SUCCESS and self._connack is None:
                break
        if self._connack is None or self._connack.is_failure:
            self.client.disconnect()
            reason = self._connack or (
                "no answer" if settings.tls else "no answer (if it is a TLS listener, set mqtt.tls)"
            )
            raise SimulatorError(f"MQTT at {where} refused {client_id!r}: {reason}")

    def _on_connect(self, _c: object, _u: object, _f: object, rc: ReasonCode, _p: object) -> None:
        self._connack = rc

    def _on_publish(self, _c: object, _u: object, _mid: int, rc: ReasonCode, _p: object) -> None:
        self.acked += 1
        if rc.is_failure:
            self.errors += 1

    def subscribe(self, topics: list[str]) -> None:
        for i in range(0, len(topics), 100):
            self.client.subscribe([(t, 1) for t in topics[i : i + 100]])

    def publish(self, topic: str, payload: bytes, qos: int) -> None:
        info = self.client.publish(topic, payload, qos=qos)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            self.errors += 1
            self.service(0.0)
        elif qos:
            self.published_qos1 += 1

    def flush(self) -> None:
        """Write what is queued (what the socket does not take now, service() writes)."""
        if self.client.want_write():
            self.client.loop_write()

    def service(self, timeout_s: float) -> None:
        rc = self.client.loop(timeout=timeout_s)
        if rc != mqtt.MQTT_ERR_SUCCESS:
            logger.warning("MQTT connection %s: %s; reconnecting", self.client, rc)
            try:
                self.client.reconnect()
            except OSError:
                logger.warning("MQTT reconnect failed; will retry")
                time.sleep(min(timeout_s, 0.5))

    @property
    def in_flight(self) -> int:
        return self.published_qos1 - self.acked

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop(timeout=0.1)


class Links:
    """The connections of one publisher: one shared, or one per device (with credentials)."""

    def __init__(
        self,
        settings: MqttSettings,
        client_id: str,
        device_ids: list[str],
        on_message: OnMessage,
        credentials: dict[str, str] | None = None,
        track_acks: bool = True,
    ) -> None:
        self.settings = settings
        self.track_acks = track_acks
        self.by_topic: dict[str, Connection] = {}
        self.connections: list[Connection] = []
        try:
            if credentials is None:
                self.connections.append(
                    Connection(settings, client_id, on_message, track_acks=track_acks)
                )
            else:
                self._per_device(device_ids, on_message, credentials)
        except SimulatorError:
            self.close()
            raise
        shared = self.connections[0] if credentials is None else None
        for device_id in device_ids:
            conn = shared or self.by_topic[settings.commands_topic(device_id)]
            self.by_topic[settings.telemetry_topic(device_id)] = conn
            self.by_topic[settings.acks_topic(device_id)] = conn
            self.by_topic[settings.commands_topic(device_id)] = conn
        for conn in self.connections:
            topics = [t for t, c in self.by_topic.items() if c is conn and t.endswith("/commands")]
            conn.subscribe(topics)

    def _per_device(
        self, device_ids: list[str], on_message: OnMessage, credentials: dict[str, str]
    ) -> None:
        if len(device_ids) > MAX_DEVICE_CONNECTIONS:
            raise SimulatorError(
                f"one connection per device is limited to {MAX_DEVICE_CONNECTIONS} devices "
                "per publisher process; use more workers"
            )
        for device_id in device_ids:
            if device_id not in credentials:
                raise SimulatorError(f"no credentials for device {device_id}")
            conn = Connection(
                self.settings.as_account(device_id, credentials[device_id]),
                device_id,
                on_message,
                track_acks=self.track_acks,
            )
            self.connections.append(conn)
            self.by_topic[self.settings.commands_topic(device_id)] = conn

    def publish_all(self, messages: Iterable[tuple[str, bytes]], qos: int) -> None:
        by_topic = self.by_topic
        for n, (topic, payload) in enumerate(messages, 1):
            conn = by_topic[topic]
            conn.publish(topic, payload, qos)
            if qos and n % 500 == 0:
                conn.service(0.0)
        for conn in self.connections:
            conn.flush()

    def service(self, timeout_s: float) -> None:
        if len(self.connections) == 1:
            self.connections[0].service(timeout_s)
            return
        for conn in self.connections:
            conn.service(0.0)
        if timeout_s > 0:
            time.sleep(timeout_s)

    def totals(self) -> tuple[int, int]:
        """(acknowledged QoS 1 publishes, errors) over every connection."""
        return sum(c.acked for c in self.connections), sum(c.errors for c in self.connections)

    def drain(self, timeout_s: float) -> int:
        """Wait for in-flight QoS 1 publishes; the number still unacknowledged at the deadline."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(c.in_flight > 0 for c in self.connections):
            self.service(0.05)
        return sum(max(c.in_flight, 0) for c in self.connections)

    def close(self) -> None:
        for conn in self.connections:
            conn.close()
