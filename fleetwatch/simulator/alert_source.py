"""Reading every alert event currently on the ``alerts`` topic (for ``sim eval``)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from fleetwatch.contracts.settings import Settings
from fleetwatch.simulator.errors import SimulatorError


def read_alerts(settings: Settings, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """All records from the beginning of the alerts topic up to its end when called."""
    topic = settings.topics.alerts
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka.bootstrap_servers,
            "group.id": f"fleetwatch-sim-eval-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            raise SimulatorError(f"no topic {topic!r} at {settings.kafka.bootstrap_servers}")
        ends = {}
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        done: set[int] = set()
        while len(done) < len(ends) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is not None:
                    continue
                out.append(json.loads(msg.value() or b"{}"))
                if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                    done.add(msg.partition() or 0)
        if len(done) < len(ends):
            raise SimulatorError(f"timed out reading {topic!r}")
        return out
    finally:
        consumer.close()
