"""The gateway process: MQTT (shared subscription, QoS 1, manual acks) ⇄ Kafka.

Telemetry and command acks come in over MQTT and go to Kafka; commands go the other way.

*Nothing accepted is lost.* A QoS 1 message is acknowledged to the MQTT broker (PUBACK) only
once Kafka has confirmed every record made from it — accepted readings and dead letters alike.
A gateway killed before that leaves the message unacknowledged in its persistent MQTT session,
and the broker delivers it again when the gateway (same client id) comes back.

*Backpressure.* At most ``max_in_flight`` messages are unacknowledged at once (MQTT v5
receive-maximum, so the broker holds the rest), and the Kafka producer's local queue is bounded.
When Kafka is slow or away, the gateway stops acknowledging and the broker keeps the backlog;
the gateway's memory stays bounded and it catches up when Kafka returns.

*A record Kafka refuses for good* (not authorised, too large, a timestamp out of the topic's
range: librdkafka retries everything else for ever) goes to ``telemetry.deadletter`` with the
reason and the topic it was meant for, and its MQTT message is acknowledged once that is in
Kafka; only a dead letter Kafka refuses too leaves its message unacknowledged. One such record
no longer holds a slot of the in-flight window for ever (at ``max_in_flight`` of them, intake
stopped).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import paho.mqtt.client as mqtt
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from fleetwatch.contracts import deadletter
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.settings import Settings
from fleetwatch.ingest.accept import (
    Headers,
    Outcome,
    capped,
    dead_letter,
    device_from_topic,
    handle,
)
from fleetwatch.ingest.acks import handle_ack
from fleetwatch.ingest.clock import ClockOffsets
from fleetwatch.ingest.commands import CommandRelay
from fleetwatch.ingest.errors import IngestError, PayloadRejected
from fleetwatch.ingest.metrics import GatewayMetrics, OverRate
from fleetwatch.ingest.mqtt_client import BufferedClient
from fleetwatch.ingest.rate import DeviceRates
from fleetwatch.kafka_config import client_config
from fleetwatch.mqtt_config import configure, connect_failure

logger = logging.getLogger(__name__)

SESSION_EXPIRY_S = 7 * 24 * 3600
RECONNECT_MIN_S, RECONNECT_MAX_S = 1, 2
"""paho's reconnect back-off (its default grows to 2 minutes)."""
METRICS_EVERY_S = 0.1
"""How often the main loop publishes the metrics counted per message and record."""


@dataclass
class Counters:
    """What the gateway has done, logged now and then. Each figure is written by one thread
    alone (MQTT's: ``messages`` to ``acks_forwarded``; the main loop's: the rest), so the hot
    paths add to it without a lock; :meth:`add` takes one for anyone else."""

    messages: int = 0
    accepted: int = 0
    clamped: int = 0
    """Accepted readings whose event time was clamped to their arrival (accept.MAX_AHEAD_MS)."""
    rejected: int = 0
    redirected: int = 0
    """Records Kafka refused for good, sent to the dead-letter topic instead."""
    acks_forwarded: int = 0
    acked: int = 0
    delivery_errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)


def producer_config(settings: Settings) -> dict[str, Any]:
    g = settings.gateway
    return client_config(
        settings.kafka,
        {
            "client.id": g.client_id,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": g.linger_ms,
            "compression.type": "lz4",
            # Keep retrying while Kafka is away: MQTT holds the backlog meanwhile.
            "delivery.timeout.ms": 2_147_483_647,
            "queue.buffering.max.messages": g.producer_queue_messages,
            "queue.buffering.max.kbytes": g.producer_queue_kbytes,
            "log_level": 4,
        },
    )


Refused = Callable[[Message, KafkaError, "_PendingAck"], bool]
"""Takes a record Kafka refused for good; ``True`` when a dead letter for it is on its way
(delivered with the same :class:`_PendingAck`)."""


class _NotQueued:
    """A record ``produce`` refused at once, as its delivery report would name it."""

    __slots__ = ("_key", "_topic", "_value")

    def __init__(self, topic: str, key: bytes, value: bytes) -> None:
        self._topic, self._key, self._value = topic, key, value

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def latency(self) -> None:
        return None


class _Acknowledger(Protocol):
    def ack(self, mid: int, qos: int) -> object: ...


class _Acks:
    """The acknowledgements of the MQTT messages whose records one producer poll confirmed,
    handed to paho's network thread together (:meth:`BufferedClient.ack_all`): one queued
    packet, one wake-up of the thread and one ``send`` for them all."""

    __slots__ = ("_client", "_mids")

    def __init__(self, client: BufferedClient) -> None:
        self._client = client
        self._mids: deque[int] = deque()

    def ack(self, mid: int, qos: int) -> None:
        if qos == 1:
            self._mids.append(mid)
        else:
            self._client.ack(mid, qos)

    def send(self) -> None:
        """Acknowledge what :meth:`ack` took since the last call, in its order."""
        mids = self._mids
        if mids:
            self._client.ack_all([mids.popleft() for _ in range(len(mids))])


@dataclass(slots=True, eq=False)
class _PendingAck:
    """Acknowledge one MQTT message once all records made from it are in Kafka."""

    client: _Acknowledger
    counters: Counters
    mid: int
    qos: int
    remaining: int
    """Records of the message without a delivery report yet."""
    refused: Refused | None = None
    metrics: GatewayMetrics | None = None
    failed: bool = field(default=False, init=False)

    def __call__(self, err: KafkaError | None, record: Message) -> None:
        if self.metrics is not None:
            self.metrics.delivered(err, record)
        if err is not None and self.refused is not None and self.refused(record, err, self):
            self.remaining += 1  # its dead letter's delivery now stands for it
        elif err is not None:
            self.failed = True
            self.counters.add("delivery_errors")
            logger.error(
                "Kafka refused a record of MQTT message %d (left unacknowledged): %s", self.mid, err
            )
        self.remaining -= 1
        if self.remaining > 0:
            return
        if self.metrics is not None:
            self.metrics.settled()
        if not self.failed and self.qos > 0:
            self.client.ack(self.mid, self.qos)
            self.counters.acked += 1


class Gateway:
    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], int] = now_ms,
        client_id: str | None = None,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.counters = Counters()
        self.metrics = metrics if metrics is not None else GatewayMetrics()
        """Served by the caller (:func:`fleetwatch.ingest.metrics.exported`), if at all."""
        self._connected_before = False
        self.clocks = ClockOffsets()
        self._refused: deque[tuple[bytes, bytes, Headers, _PendingAck]] = deque()
        self._closing = threading.Event()
        self.producer = Producer(producer_config(settings))
        self.client_id = client_id or settings.gateway.client_id
        self.client = BufferedClient(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=mqtt.MQTTv5,
            manual_ack=True,
        )
        self.client.max_inflight_messages_set(1000)
        # back within seconds of a broker restart: readings published before the gateway
        # subscribes again may have no subscriber (see ``gateway.shared``)
        self.client.reconnect_delay_set(min_delay=RECONNECT_MIN_S, max_delay=RECONNECT_MAX_S)
        configure(self.client, settings.mqtt)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.client.on_unsubscribe = self._on_unsubscribe
        self._telemetry_suffix = "/telemetry"
        self._root = settings.mqtt.root
        self._max_bytes = settings.gateway.max_payload_bytes
        self._raw_topic = settings.topics.telemetry_raw
        self._retiring = False
        self._unsubscribed = threading.Event()
        self._last_message = time.monotonic()
        self._acks = _Acks(self.client)
        """Filled by delivery reports during a producer poll, sent after it."""
        self.relay = CommandRelay(settings, self.client, self.metrics)
        g = settings.gateway
        self.rates = DeviceRates(g.device_rate, g.device_burst, g.device_backlog_s)
        self.over_rate = OverRate(self.metrics.rate_limited_devices)

    # -- MQTT side (paho's network thread) ---------------------------------------------------
    def _on_connect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        if reason.is_failure:
            logger.error("MQTT connect refused: %s", reason)
            return
        if self._connected_before:
            self.metrics.mqtt_reconnects.inc()
        self._connected_before = True
        self.metrics.mqtt_connected.set(1)
        filters, other = self._filters(self._shared()), self._filters(not self._shared())
        if self._retiring:
            client.unsubscribe(filters + other)  # whichever way it had subscribed
            logger.info(
                "retiring %s: unsubscribed, draining what the broker queued for it", self.client_id
            )
            return
        # Always again, even when the broker kept the session: Mosquitto does not keep a shared
        # subscription over its restart, nor a plain one it had not saved yet.
        client.subscribe([(f, 1) for f in filters])
        if flags.session_present:
            # a session that subscribed the other way (shared before, plain now, or the
            # reverse) stops getting both, once the new subscription is in place
            client.unsubscribe(other)
        logger.info(
            "connected to MQTT as %s (session present: %s), subscribed to %s",
            self.client_id,
            flags.session_present,
            ", ".join(filters),
        )

    def _shared(self) -> bool:
        return self.settings.gateway.shared or self.settings.gateway.workers > 1

    def _filters(self, shared: bool) -> list[str]:
        """The telemetry and acks filters, through the shared group or plain."""
        m = self.settings.mqtt
        prefix = f"$share/{self.settings.gateway.share_group}/" if shared else ""
        return [f"{prefix}{m.telemetry_filter}", f"{prefix}{m.acks_filter}"]

    def _on_unsubscribe(
        self, client: mqtt.Client, userdata: Any, mid: int, reasons: Any, props: Any
    ) -> None:
        if self._retiring:
            self._unsubscribed.set()

    def _on_disconnect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        self.metrics.mqtt_connected.set(0)
        if not self._closing.is_set():
            logger.warning("MQTT connection lost (%s); reconnecting", reason)

    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        if self._closing.is_set():
            return  # not acknowledged: the broker delivers it again to the next session
        received = self.clock()
        self._last_message = time.monotonic()
        counters = self.counters
        counters.messages += 1
        topic = msg.topic  # paho decodes it at every access
        root = self._root
        telemetry = topic.endswith(self._telemetry_suffix)
        if telemetry:
            outcome = handle(topic, msg.payload, received, root, self._max_bytes, self.clocks)
            device_id = _device_of(topic, root)
            sent = max((a.sent_ms for a in outcome.accepted if a.sent_ms is not None), default=None)
            if device_id is not None and not self.rates.admit(device_id, sent):
                outcome = self._rate_limited(device_id, msg, received)
            counters.accepted += len(outcome.accepted)
            counters.clamped += sum(a.clamped for a in outcome.accepted)
            target = self._raw_topic
        else:
            outcome = handle_ack(topic, msg.payload, received, root)
            counters.acks_forwarded += len(outcome.accepted)
            target = self.settings.topics.device_command_acks
        if outcome.rejected:
            counters.rejected += sum(dl.readings for dl in outcome.rejected)
        self.metrics.handled(outcome, telemetry)
        pending = _PendingAck(
            self._acks,
            counters,
            msg.mid,
            msg.qos,
            _size(outcome),
            self._on_refused,
            self.metrics,
        )
        self._produce_all(outcome, target, pending, received)

    def _rate_limited(self, device_id: str, msg: mqtt.MQTTMessage, received: int) -> Outcome:
        """A message over its device's rate: a dead letter whose ``fw.kind`` says so (the API
        shows the device rate-limited from it), the device counted among those over their rate
        (:class:`~fleetwatch.ingest.metrics.OverRate`), and a warning once a minute."""
        g = self.settings.gateway
        reason = (
            f"device {device_id} exceeds its rate of {g.device_rate:g} messages/s "
            f"(burst {g.device_burst})"
        )
        if self.over_rate.hit(device_id):
            logger.warning("%s: its messages over the rate go to the dead letters", reason)
        root = self.settings.mqtt.root
        dead = dead_letter(msg.topic, msg.payload, received, reason, root, {"rate_limited": 1})
        kind = (deadletter.KIND, deadletter.RATE_LIMITED.encode())
        return Outcome(rejected=[replace(dead, headers=[*dead.headers, kind])])

    def _produce_all(
        self, outcome: Outcome, target: str, on_delivery: _PendingAck, received: int
    ) -> None:
        for ok in outcome.accepted:
            self._produce(target, ok.key, ok.value, ok.timestamp_ms, on_delivery)
        for dl in outcome.rejected:
            logger.debug("rejected: %s", dl.reason)
            self._produce(
                self.settings.topics.telemetry_deadletter,
                dl.key,
                dl.value,
                received,
                on_delivery,
                dl.headers,
            )

    def _on_refused(self, record: Message, err: KafkaError, pending: _PendingAck) -> bool:
        """Queue a dead letter for a record Kafka refused for good (it is produced from the
        main loop: this runs inside the producer's poll); ``False`` for a dead letter itself."""
        topic = record.topic() or ""
        if topic == self.settings.topics.telemetry_deadletter:
            return False
        reason = f"Kafka refused the record for {topic}: {err}"
        value, cut = capped(record.value() or b"")
        headers: Headers = [
            ("fw.reason", reason.encode()),
            ("fw.stage", b"gateway"),
            ("fw.source_topic", topic.encode()),
            ("fw.received_ms", str(self.clock()).encode()),
            *cut,
        ]
        self._refused.append((record.key() or b"", value, headers, pending))
        self.counters.add("redirected")
        self.metrics.refused()
        logger.error("%s; sent to %s", reason, self.settings.topics.telemetry_deadletter)
        return True

    def _redirect_refused(self) -> None:
        while self._refused:
            key, value, headers, pending = self._refused.popleft()
            dead = self.settings.topics.telemetry_deadletter
            self._produce(dead, key, value, self.clock(), pending, headers)

    def _produce(
        self,
        topic: str,
        key: bytes,
        value: bytes,
        timestamp_ms: int,
        on_delivery: Callable[[KafkaError | None, Message], None],
        headers: Headers | None = None,
    ) -> None:
        while True:
            try:
                self.producer.produce(
                    topic,
                    value,
                    key,
                    timestamp=timestamp_ms,
                    headers=headers,
                    on_delivery=on_delivery,
                )
                return
            except BufferError:
                # The bounded local queue is full (Kafka slow or away). Blocking here blocks MQTT
                # intake: unacknowledged messages stay with the broker until Kafka catches up.
                time.sleep(0.05)
            except KafkaException as exc:
                # refused before it was queued (larger than the producer takes, say): the
                # same path as a refusal its delivery report brings, so it is dead-lettered
                # and its MQTT message acknowledged once that is in, never left waiting
                on_delivery(exc.args[0], _NotQueued(topic, key, value))  # type: ignore[arg-type]
                return

    # -- lifecycle (main thread) -----------------------------------------------------------
    def run(self, stop: threading.Event, report_every_s: float = 30.0) -> None:
        self._connect()
        last_report = last_sweep = last_flush = time.monotonic()
        try:
            while not stop.is_set():
                self.producer.poll(0.05)
                self._acks.send()
                self._redirect_refused()
                self.relay.pump()
                now = time.monotonic()
                if now - last_flush >= METRICS_EVERY_S:
                    last_flush = now
                    self._flush_metrics()
                if now - last_sweep >= 1.0:
                    last_sweep = now
                    self.over_rate.sweep()  # a device no longer over its rate leaves the gauge
                if now - last_report >= report_every_s:
                    last_report = now
                    logger.info("%s", self.counters)
        finally:
            self.close()

    def _flush_metrics(self) -> None:
        self.metrics.producer_queue.set(len(self.producer))
        self.metrics.flush()

    def retire(self, stop: threading.Event, idle_s: float = 2.0) -> int:
        """End this worker's session without losing what the broker queued for it.

        Used when the number of workers shrinks: the session of a worker that will not come
        back is resumed, unsubscribed (so the shared group stops dealing it messages), drained
        into Kafka like any other session, and then ended. Returns the messages drained."""
        self._retiring = True
        self._connect()
        try:
            while not stop.is_set():
                self.producer.poll(0.05)
                self._acks.send()
                self._redirect_refused()
                self._flush_metrics()
                quiet = time.monotonic() - self._last_message > idle_s
                drained = len(self.producer) == 0 and not self._refused
                if self._unsubscribed.is_set() and quiet and drained:
                    break
        finally:
            self._closing.set()
            self.producer.flush(30)
            self._acks.send()
            end = Properties(PacketTypes.DISCONNECT)  # type: ignore[no-untyped-call]
            end.SessionExpiryInterval = 0
            self.client.disconnect(properties=end)
            self.client.loop_stop()
            self.relay.close()
            self._flush_metrics()
        logger.info("retired %s after draining %d messages", self.client_id, self.counters.messages)
        return self.counters.messages

    def _connect(self) -> None:
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = SESSION_EXPIRY_S
        props.ReceiveMaximum = self.settings.gateway.max_in_flight
        try:
            self.client.connect(
                self.settings.mqtt.host,
                self.settings.mqtt.port,
                keepalive=self.settings.mqtt.keepalive_s,
                clean_start=False,
                properties=props,
            )
        except OSError as exc:
            raise IngestError(connect_failure(exc, self.settings.mqtt)) from exc
        self.client.loop_start()

    def close(self) -> None:
        """Stop taking messages, deliver (and acknowledge) what is in flight, then disconnect."""
        self._closing.set()
        remaining = self.producer.flush(30)
        if remaining:
            logger.warning(
                "%d records not confirmed by Kafka at shutdown; MQTT will deliver them again",
                remaining,
            )
        self._acks.send()  # queued before the DISCONNECT, so written before it
        self.relay.close()
        self.client.disconnect()
        self.client.loop_stop()
        self._flush_metrics()
        logger.info("gateway stopped: %s", self.counters)


def _device_of(topic: str, root: str) -> str | None:
    """The device id of a telemetry topic, or ``None`` (the accept step says why not)."""
    try:
        return device_from_topic(topic, root)
    except PayloadRejected:
        return None


def _size(outcome: Outcome) -> int:
    return len(outcome.accepted) + len(outcome.rejected)
