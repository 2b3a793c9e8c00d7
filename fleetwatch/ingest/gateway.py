"""The gateway process: MQTT (shared subscription, QoS 1, manual acks) → Kafka.

A QoS 1 message is acknowledged to the MQTT broker only from the Kafka delivery callback,
so a crash before Kafka confirmed it leaves it unacknowledged in the gateway's persistent
session and the broker delivers it again. Rejected messages go to the dead-letter topic (and
are acknowledged once that write is confirmed): the gateway never stops on bad input.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as mqtt
from confluent_kafka import KafkaError, Message, Producer
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from fleetwatch.contracts.settings import Settings
from fleetwatch.ingest.accept import accept, dead_letter
from fleetwatch.ingest.errors import IngestError, PayloadRejected

logger = logging.getLogger(__name__)

SESSION_EXPIRY_S = 7 * 24 * 3600


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Counters:
    accepted: int = 0
    rejected: int = 0
    acked: int = 0
    delivery_errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)


def producer_config(settings: Settings) -> dict[str, Any]:
    return {
        "bootstrap.servers": settings.kafka.bootstrap_servers,
        "client.id": settings.gateway.client_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "delivery.timeout.ms": 2_147_483_647,
        "queue.buffering.max.messages": 100_000,
    }


class Gateway:
    def __init__(
        self, settings: Settings, clock: Callable[[], int] = now_ms, client_id: str | None = None
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.counters = Counters()
        self._closing = threading.Event()
        self.producer = Producer(producer_config(settings))
        self.client_id = client_id or settings.gateway.client_id
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=mqtt.MQTTv5,
            manual_ack=True,
        )
        if settings.mqtt.username:
            self.client.username_pw_set(settings.mqtt.username, settings.mqtt.password)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message

    # -- MQTT side (paho's network thread) ---------------------------------------------------
    def _on_connect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        if reason.is_failure:
            logger.error("MQTT connect refused: %s", reason)
            return
        shared = f"$share/{self.settings.gateway.share_group}/{self.settings.mqtt.telemetry_filter}"
        client.subscribe(shared, qos=1)
        logger.info(
            "connected to MQTT, subscribed to %s (session present: %s)",
            shared,
            flags.session_present,
        )

    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        if self._closing.is_set():
            return  # not acknowledged: the broker redelivers it to the next session
        received = self.clock()
        on_delivery = self._ack_callback(msg.mid, msg.qos)
        try:
            ok = accept(
                msg.topic,
                msg.payload,
                received,
                self.settings.mqtt.root,
                self.settings.gateway.max_payload_bytes,
            )
        except PayloadRejected as exc:
            dl = dead_letter(msg.topic, msg.payload, received, str(exc), self.settings.mqtt.root)
            logger.debug("rejected %s: %s", msg.topic, dl.reason)
            self.counters.add("rejected")
            self._produce(
                self.settings.topics.telemetry_deadletter,
                dl.key,
                dl.value,
                received,
                on_delivery,
                dl.headers,
            )
            return
        self.counters.add("accepted")
        self._produce(
            self.settings.topics.telemetry_raw, ok.key, ok.value, ok.timestamp_ms, on_delivery
        )

    def _produce(
        self,
        topic: str,
        key: bytes,
        value: bytes,
        timestamp_ms: int,
        on_delivery: Callable[[KafkaError | None, Message], None],
        headers: list[tuple[str, str | bytes | None]] | None = None,
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
                # The local queue is full: Kafka is slow or away. Block this thread (and so MQTT
                # intake, which stops acknowledging) until deliveries free room.
                self.producer.poll(0.1)

    def _ack_callback(self, mid: int, qos: int) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(err: KafkaError | None, record: Message) -> None:
            if err is not None:
                self.counters.add("delivery_errors")
                logger.error("Kafka refused a record (mid %d, left unacknowledged): %s", mid, err)
                return
            if qos > 0:
                self.client.ack(mid, qos)
                self.counters.add("acked")

        return on_delivery

    # -- lifecycle (main thread) -----------------------------------------------------------
    def run(self, stop: threading.Event, report_every_s: float = 30.0) -> None:
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = SESSION_EXPIRY_S
        try:
            self.client.connect(
                self.settings.mqtt.host,
                self.settings.mqtt.port,
                keepalive=self.settings.mqtt.keepalive_s,
                clean_start=False,
                properties=props,
            )
        except OSError as exc:
            raise IngestError(
                f"cannot reach MQTT at {self.settings.mqtt.host}:{self.settings.mqtt.port}: {exc}"
            ) from exc
        self.client.loop_start()
        last_report = time.monotonic()
        try:
            while not stop.is_set():
                self.producer.poll(0.1)
                if time.monotonic() - last_report >= report_every_s:
                    last_report = time.monotonic()
                    c = self.counters
                    logger.info("accepted=%d rejected=%d acked=%d", c.accepted, c.rejected, c.acked)
        finally:
            self.close()

    def close(self) -> None:
        """Stop taking messages, deliver (and acknowledge) what is in flight, then disconnect."""
        self._closing.set()
        remaining = self.producer.flush(30)
        if remaining:
            logger.warning(
                "%d records not confirmed by Kafka at shutdown; MQTT will redeliver them", remaining
            )
        self.client.disconnect()
        self.client.loop_stop()
        logger.info("gateway stopped: %s", self.counters)
