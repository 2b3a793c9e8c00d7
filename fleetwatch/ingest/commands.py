"""``device.commands`` (Kafka) → ``{root}/{device_id}/commands`` (MQTT, QoS 1).

A command's Kafka offset is committed only after the MQTT broker acknowledged the publish
(PUBACK), so a gateway stopped at any point re-sends rather than loses a command; devices
recognise a repeat by its ``command_id``. A record that is not a valid command is logged and
skipped (it stays in the topic for inspection) — it never stops the relay. While MQTT is
away (the publish refused, or not acknowledged in time) the relay goes back to the command and
tries again ``RETRY_S`` later: the gateway's loop, which also serves Kafka, never stops on it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import paho.mqtt.client as mqtt
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from fleetwatch.contracts.commands import parse_command
from fleetwatch.contracts.errors import PayloadError
from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import client_config

if TYPE_CHECKING:
    from fleetwatch.ingest.metrics import GatewayMetrics

logger = logging.getLogger(__name__)

PUBACK_TIMEOUT_S = 10.0
RETRY_S = 1.0
"""How long the relay leaves a command MQTT did not take before trying it again."""


class CommandRelay:
    def __init__(
        self, settings: Settings, client: mqtt.Client, metrics: GatewayMetrics | None = None
    ) -> None:
        self.settings = settings
        self.client = client
        self.metrics = metrics
        self.consumer = Consumer(
            client_config(
                settings.kafka,
                {
                    "group.id": f"{settings.gateway.share_group}-commands",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest",
                },
            )
        )
        self.consumer.subscribe([settings.topics.device_commands])
        self.relayed = 0
        self.invalid = 0
        self.retry_at = 0.0

    def pump(self, max_messages: int = 100) -> int:
        """Relay what is waiting (non-blocking); returns how many records were done with."""
        if time.monotonic() < self.retry_at:
            return 0
        stored = 0
        for msg in self.consumer.consume(max_messages, timeout=0):
            if (err := msg.error()) is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    logger.warning("command consumer: %s", err)
                continue
            if not self._relay(msg):
                # MQTT did not take it: go back to this command and try again later
                self.retry_at = time.monotonic() + RETRY_S
                self.consumer.seek(
                    TopicPartition(msg.topic() or "", msg.partition() or 0, msg.offset() or 0)
                )
                break
            self.consumer.store_offsets(msg)
            stored += 1
        if stored:
            self.consumer.commit(asynchronous=True)
        return stored

    def _relay(self, msg: Message) -> bool:
        try:
            command = parse_command(msg.value() or b"")
        except PayloadError as exc:
            self.invalid += 1
            if self.metrics is not None:
                self.metrics.commands_invalid.inc()
            logger.error(
                "skipping an invalid command at %s[%d]@%d: %s",
                msg.topic(),
                msg.partition(),
                msg.offset(),
                exc,
            )
            return True
        topic = self.settings.mqtt.commands_topic(command.device_id)
        try:
            info = self.client.publish(topic, command.model_dump_json().encode(), qos=1)
            info.wait_for_publish(PUBACK_TIMEOUT_S)
        except (RuntimeError, ValueError) as exc:  # paho: not queued (no connection, queue full)
            logger.warning(
                "command %s to %s not taken by MQTT (%s); will retry",
                command.command_id,
                topic,
                exc,
            )
            return False
        if not info.is_published():
            logger.warning(
                "command %s to %s not acknowledged by MQTT yet; will retry",
                command.command_id,
                topic,
            )
            return False
        self.relayed += 1
        if self.metrics is not None:
            self.metrics.commands_relayed.inc()
        logger.info("relayed command %s (%s) to %s", command.command_id, command.name, topic)
        return True

    def close(self) -> None:
        try:
            self.consumer.commit(asynchronous=False)
        except Exception as exc:  # noqa: BLE001 - nothing stored to commit is not an error
            logger.debug("final command offset commit: %s", exc)
        self.consumer.close()
