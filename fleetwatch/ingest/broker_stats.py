"""The MQTT broker's own figures (Mosquitto's ``$SYS/broker/...`` topics) as Prometheus
metrics ``fleetwatch_mosquitto_*``, served with the gateway's.

Mosquitto publishes each ``$SYS`` topic every ``sys_interval`` (10 s by default) to clients
that subscribe to it; ``$SYS`` is not matched by ``#``, and with an ACL the reader needs
``topic read $SYS/#`` (the stack's rendered ACL and ``deploy/mosquitto/acl.example`` grant it
to the gateway's account, whose credentials the bridge logs in with). The bridge is a
connection of its own (clean session, a client id the broker assigns): the gateway's
persistent sessions and their receive window stay for telemetry, and ``--workers N`` has one
bridge, in the process that serves the metrics. A broker that publishes none of these topics
(not Mosquitto, or ``sys_interval 0``) gives no samples.

Totals since the broker started are counters (they restart with the broker, which
Prometheus's ``rate`` takes as a reset), levels are gauges, and Mosquitto's one-minute load
averages, given per minute, are gauges per second.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleetwatch.contracts.settings import Settings
from fleetwatch.mqtt_config import configure

logger = logging.getLogger(__name__)

PREFIX = "fleetwatch_mosquitto_"


@dataclass(frozen=True)
class SysTopic:
    name: str
    """The metric's name after :data:`PREFIX` (a counter's without ``_total``)."""
    kind: Literal["counter", "gauge"]
    help: str
    scale: float = 1.0
    """Multiplies the published number (1/60: a per-minute average as per second)."""


SYS_TOPICS: dict[str, SysTopic] = {
    "$SYS/broker/clients/connected": SysTopic(
        "clients_connected", "gauge", "Clients connected to the broker"
    ),
    "$SYS/broker/clients/disconnected": SysTopic(
        "clients_disconnected",
        "gauge",
        "Persistent sessions whose client is not connected (their messages are queued)",
    ),
    "$SYS/broker/messages/received": SysTopic(
        "messages_received", "counter", "MQTT messages of any type received by the broker"
    ),
    "$SYS/broker/messages/sent": SysTopic(
        "messages_sent", "counter", "MQTT messages of any type sent by the broker"
    ),
    "$SYS/broker/publish/messages/dropped": SysTopic(
        "publish_messages_dropped",
        "counter",
        "PUBLISH messages the broker dropped on its in-flight or queue limits",
    ),
    "$SYS/broker/bytes/received": SysTopic(
        "received_bytes", "counter", "Bytes received by the broker"
    ),
    "$SYS/broker/bytes/sent": SysTopic("sent_bytes", "counter", "Bytes sent by the broker"),
    "$SYS/broker/messages/inflight": SysTopic(
        "inflight_messages", "gauge", "QoS 1 and 2 messages awaiting acknowledgement"
    ),
    "$SYS/broker/store/messages/count": SysTopic(
        "stored_messages",
        "gauge",
        "Messages held by the broker: retained, and queued for persistent sessions",
    ),
    "$SYS/broker/store/messages/bytes": SysTopic(
        "stored_bytes", "gauge", "Payload bytes of the messages the broker holds"
    ),
    "$SYS/broker/load/messages/received/1min": SysTopic(
        "messages_received_per_second",
        "gauge",
        "MQTT messages received per second, averaged over the last minute",
        1 / 60,
    ),
    "$SYS/broker/load/messages/sent/1min": SysTopic(
        "messages_sent_per_second",
        "gauge",
        "MQTT messages sent per second, averaged over the last minute",
        1 / 60,
    ),
    "$SYS/broker/uptime": SysTopic("uptime_seconds", "gauge", "Seconds since the broker started"),
}


def sys_value(topic: str, payload: bytes | bytearray) -> tuple[SysTopic, float] | None:
    """The metric a ``$SYS`` message updates and its value; ``None`` for a topic not bridged
    or a payload that is no number. Payloads are decimal text, ``uptime`` with a unit
    (``"1234 seconds"``)."""
    found = SYS_TOPICS.get(topic)
    if found is None:
        return None
    words = payload.decode("ascii", errors="replace").split()
    try:
        value = float(words[0])
    except (IndexError, ValueError):
        return None
    return found, value * found.scale


class BrokerStats(Collector):
    """The latest value of each bridged topic, collected as metrics; forgotten when the bridge
    loses the broker (an old figure is not passed off as a current one)."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[SysTopic, float]] = {}
        self._lock = threading.Lock()

    def update(self, topic: str, payload: bytes | bytearray) -> bool:
        parsed = sys_value(topic, payload)
        if parsed is None:
            return False
        with self._lock:
            self._values[topic] = parsed
        return True

    def clear(self) -> None:
        with self._lock:
            self._values.clear()

    def zero_counters(self) -> None:
        """Every bridged counter at 0 until the broker says otherwise: Mosquitto publishes a
        ``$SYS`` counter only once it has moved (a broker that never dropped a message has no
        ``publish/messages/dropped``), and a count that is 0 is a count, not a gap."""
        with self._lock:
            for topic, sys_topic in SYS_TOPICS.items():
                if sys_topic.kind == "counter":
                    self._values.setdefault(topic, (sys_topic, 0.0))

    def describe(self) -> Iterable[Metric]:
        return []  # names are fixed and prefixed: nothing to check against other collectors

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            values = list(self._values.values())
        for sys_topic, value in values:
            name = PREFIX + sys_topic.name
            family: Metric
            if sys_topic.kind == "counter":
                family = CounterMetricFamily(name, sys_topic.help, value=value)
            else:
                family = GaugeMetricFamily(name, sys_topic.help, value=value)
            yield family


class SysBridge:
    """A connection that subscribes to :data:`SYS_TOPICS` and keeps :class:`BrokerStats`
    (registered on ``registry``) up to date. Its network thread is paho's, stopped and joined
    by :meth:`stop`; it reconnects on its own while running."""

    def __init__(self, settings: Settings, registry: CollectorRegistry) -> None:
        self.settings = settings
        self.stats = BrokerStats()
        registry.register(self.stats)
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="", protocol=mqtt.MQTTv5)
        configure(self.client, settings.mqtt)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe

    def start(self) -> None:
        """Connect in the background (the gateway's own connection reports an unreachable
        broker; figures arrive once this one is in)."""
        m = self.settings.mqtt
        self.client.connect_async(m.host, m.port, keepalive=m.keepalive_s, clean_start=True)
        self.client.loop_start()

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
        self.stats.clear()

    def _on_connect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        if reason.is_failure:
            logger.warning("broker figures ($SYS): connection refused: %s", reason)
            return
        self.stats.zero_counters()
        client.subscribe([(topic, 0) for topic in SYS_TOPICS])

    def _on_subscribe(
        self, client: mqtt.Client, userdata: Any, mid: int, reasons: Any, props: Any
    ) -> None:
        refused = [str(r) for r in reasons if r.is_failure]
        if refused:
            logger.warning(
                "broker figures ($SYS): %d of %d subscriptions refused (%s); "
                "the gateway's account needs `topic read $SYS/#` in the broker's ACL",
                len(refused),
                len(SYS_TOPICS),
                refused[0],
            )

    def _on_disconnect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        self.stats.clear()

    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        self.stats.update(msg.topic, msg.payload)
