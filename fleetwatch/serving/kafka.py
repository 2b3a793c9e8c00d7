"""The API's Kafka consumers: manual commits, from the earliest offset on a new group."""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from fleetwatch.contracts.settings import KafkaSettings
from fleetwatch.kafka_config import client_config

logger = logging.getLogger(__name__)


def consumer_config(kafka: KafkaSettings, group: str, session_timeout_s: float) -> dict[str, Any]:
    return client_config(
        kafka,
        {
            "group.id": group,
            "session.timeout.ms": round(session_timeout_s * 1000),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        },
    )


def poll(consumer: Consumer, max_messages: int = 500, timeout_s: float = 0.2) -> list[Message]:
    """The records of one poll; consumer errors are logged, never raised."""
    good: list[Message] = []
    for msg in consumer.consume(num_messages=max_messages, timeout=timeout_s):
        err = msg.error()
        if err is None:
            good.append(msg)
        elif err.code() != KafkaError._PARTITION_EOF:
            logger.warning("Kafka consumer error: %s", err)
    return good


def where(msg: Message) -> str:
    return f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"


def rewind(consumer: Consumer, messages: list[Message]) -> None:
    """Go back to the first of ``messages`` on each partition (their batch was not stored)."""
    first: dict[tuple[str, int], int] = {}
    for m in messages:
        tp = (m.topic() or "", m.partition() or 0)
        first[tp] = min(first.get(tp, m.offset() or 0), m.offset() or 0)
    for (topic, partition), offset in first.items():
        consumer.seek(TopicPartition(topic, partition, offset))
