"""The ``rules`` topic followed from its start: the current version of every rule, kept up to
date as the API writes (a tombstone deletes). A record that breaks the contract is logged and
passed over: one bad record does not stop the others."""

from __future__ import annotations

import logging
import threading

from confluent_kafka import Consumer, KafkaError, TopicPartition

from fleetwatch.contracts.rules import RULE_KEY_PREFIX, RuleRecord, decode
from fleetwatch.contracts.settings import KafkaSettings
from fleetwatch.kafka_config import client_config

logger = logging.getLogger(__name__)

GROUP = "spark-kafka-source-rules"
"""Names the consumer only (offsets are assigned, never committed); under the prefix of the
Spark jobs' groups, which the scorer's login may use."""


class RuleFollower:
    """The rules as of the topic's latest records (:attr:`rules`), :attr:`changed` set on every
    change; :meth:`poll` reads what has come."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self.topic = topic
        self.rules: dict[str, RuleRecord] = {}
        self.changed = threading.Event()
        self._consumer = Consumer(
            client_config(
                kafka,
                {
                    "group.id": GROUP,
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "log_level": 3,
                },
            )
        )
        meta = self._consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            self._consumer.close()
            raise LookupError(f"no topic {topic!r}: create it with `fleetwatch topics create`")
        self._consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])

    def poll(self, timeout_s: float) -> bool:
        """Read what has come within ``timeout_s``; True if a rule changed."""
        changed = False
        for message in self._consumer.consume(500, timeout=timeout_s):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    logger.warning("reading %s: %s", self.topic, error)
                continue
            changed |= self._apply(message.key(), message.value())
        if changed:
            self.changed.set()
        return changed

    def _apply(self, key: bytes | None, value: bytes | None) -> bool:
        text = (key or b"").decode("utf-8", "replace")
        if not text.startswith(RULE_KEY_PREFIX):
            logger.warning("%s: a record keyed %r is not a rule's; passed over", self.topic, text)
            return False
        rule_id = text[len(RULE_KEY_PREFIX) :]
        if value is None:
            return self.rules.pop(rule_id, None) is not None
        try:
            record = decode(value)
        except ValueError as exc:
            logger.warning(
                "%s: rule %r breaks the contract, passed over: %s", self.topic, rule_id, exc
            )
            return False
        if record.id != rule_id:
            logger.warning(
                "%s: a record keyed %r holds rule %r; passed over", self.topic, text, record.id
            )
            return False
        if self.rules.get(rule_id) == record:
            return False
        self.rules[rule_id] = record
        return True

    def close(self) -> None:
        self._consumer.close()
