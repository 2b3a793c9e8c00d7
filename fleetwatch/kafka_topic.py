"""A whole Kafka topic read once, outside Spark: every record from the start of each partition
to its end as of the read (the fleet models' parameter table, the alert topics a replay
compares, the alerts ``sim eval`` scores)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from confluent_kafka import Consumer, TopicPartition

from fleetwatch.contracts.settings import KafkaSettings
from fleetwatch.kafka_config import client_config

POLL_S = 0.5


def end_offsets(kafka: KafkaSettings, topic: str) -> dict[int, int]:
    """Partition → the offset the next record of ``topic`` will get (its high watermark)."""
    consumer = Consumer(client_config(kafka, {"group.id": "fleetwatch-end-offsets"}))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in meta.partitions
        }
    finally:
        consumer.close()


def read_to_end(
    kafka: KafkaSettings, topic: str, group_id: str, timeout_s: float = 30.0
) -> Iterator[tuple[bytes | None, bytes | None]]:
    """``(key, value)`` of every record of ``topic`` up to the end each partition has now, in
    offset order per partition; records appended meanwhile are left out.

    Nothing is committed (``group_id`` only names the consumer). Raises :class:`LookupError`
    here when there is no such topic; the iterator raises :class:`TimeoutError` when no record
    comes for ``timeout_s`` while a partition is still unread.
    """
    consumer = Consumer(
        client_config(
            kafka,
            {
                "group.id": group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "log_level": 3,
            },
        )
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            raise LookupError(f"no topic {topic!r}")
        starts: dict[int, int] = {}
        ends: dict[int, int] = {}
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                starts[p], ends[p] = low, high
        consumer.assign([TopicPartition(topic, p, low) for p, low in starts.items()])
    except BaseException:
        consumer.close()
        raise
    return _records(consumer, topic, ends, timeout_s)


def _records(
    consumer: Consumer, topic: str, ends: dict[int, int], timeout_s: float
) -> Iterator[tuple[bytes | None, bytes | None]]:
    unread = set(ends)
    last_record = time.monotonic()
    try:
        while unread:
            batch = consumer.consume(1000, timeout=POLL_S)
            if not batch and time.monotonic() - last_record > timeout_s:
                raise TimeoutError(
                    f"{topic}: no records within {timeout_s:.0f}s, {len(unread)} partitions unread"
                )
            for msg in batch:
                partition, offset = msg.partition(), msg.offset()
                if msg.error() is not None or partition is None or offset is None:
                    continue
                last_record = time.monotonic()
                if offset >= ends[partition]:
                    continue  # appended after the read began
                if offset + 1 >= ends[partition]:
                    unread.discard(partition)
                yield msg.key(), msg.value()
    finally:
        consumer.close()
