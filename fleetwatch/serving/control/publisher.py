"""Publishing a command to ``device.commands`` (or a quarantine lift to
``device.quarantine-lifts``, an operator's rule to ``rules``) and waiting until Kafka has it."""

from __future__ import annotations

import threading
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from fleetwatch.contracts.commands import Command
from fleetwatch.contracts.quarantine import lift_key, lift_value
from fleetwatch.contracts.rules import rule_key
from fleetwatch.contracts.settings import KafkaSettings
from fleetwatch.kafka_config import client_config
from fleetwatch.serving.errors import ServingError


class PublishFailed(ServingError):
    """Kafka did not confirm the command in time."""


class CommandPublisher(Protocol):
    def publish(self, command: Command) -> None:
        """Return once the command is durable in Kafka; raise :class:`PublishFailed` if not."""

    def lift_quarantine(self, device_id: str, lifted_ms: int) -> None:
        """Return once the lift record is durable in Kafka; raise :class:`PublishFailed` if
        not."""

    def publish_rule(self, rule_id: str, value: bytes | None) -> None:
        """Return once a rule's record (``None``: its tombstone) is durable in Kafka under
        ``rule:{rule_id}``; raise :class:`PublishFailed` if not."""

    def reachable(self) -> bool: ...

    def close(self) -> None: ...


class KafkaCommandPublisher:
    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        lifts_topic: str,
        rules_topic: str,
        timeout_s: float = 5.0,
    ) -> None:
        self.topic = topic
        self.lifts_topic = lifts_topic
        self.rules_topic = rules_topic
        self.timeout_s = timeout_s
        self.producer = Producer(
            client_config(
                kafka,
                {
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 0,
                    "message.timeout.ms": int(timeout_s * 1000),
                },
            )
        )
        self._lock = threading.Lock()

    def publish(self, command: Command) -> None:
        self._send(self.topic, command.device_id, command.model_dump_json(), "the command")

    def lift_quarantine(self, device_id: str, lifted_ms: int) -> None:
        key = lift_key(device_id)
        self._send(self.lifts_topic, key, lift_value(device_id, lifted_ms), "the lift")

    def publish_rule(self, rule_id: str, value: bytes | None) -> None:
        self._send(self.rules_topic, rule_key(rule_id), value, f"the rule {rule_id!r}")

    def _send(self, topic: str, key: str, value: str | bytes | None, what: str) -> None:
        done = threading.Event()
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)
            done.set()

        try:
            with self._lock:
                self.producer.produce(
                    topic,
                    key=key.encode(),
                    value=value.encode() if isinstance(value, str) else value,
                    on_delivery=delivered,
                )
            deadline_polls = int(self.timeout_s * 20) + 20
            for _ in range(deadline_polls):
                if done.is_set():
                    break
                with self._lock:
                    self.producer.poll(0.05)
        except (KafkaException, BufferError) as exc:
            raise PublishFailed(f"Kafka refused {what}: {exc}") from exc
        if not done.is_set():
            raise PublishFailed(f"Kafka did not confirm {what} in time")
        if errors:
            raise PublishFailed(f"Kafka refused {what}: {errors[0].str()}")

    def reachable(self) -> bool:
        try:
            with self._lock:
                self.producer.list_topics(self.topic, timeout=2)
        except KafkaException:
            return False
        return True

    def close(self) -> None:
        with self._lock:
            self.producer.flush(5)
