"""Create the topics of DESIGN.md (or any list of specs) idempotently."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fleetwatch.contracts.topics import TopicSpec
from fleetwatch.stack.errors import StackError

logger = logging.getLogger(__name__)


def ensure_topics(
    bootstrap: str, specs: Iterable[TopicSpec], partitions: int, replication: int = 1
) -> list[str]:
    """Create each missing topic; returns the names created. Existing topics are left alone."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = {
        s.name: NewTopic(
            s.name, num_partitions=partitions, replication_factor=replication, config=s.config
        )
        for s in specs
    }
    existing = set(admin.list_topics(timeout=10).topics)
    missing = [t for name, t in wanted.items() if name not in existing]
    if not missing:
        return []
    created = []
    for name, future in admin.create_topics(missing, operation_timeout=30).items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise StackError(f"cannot create topic {name}: {exc.args[0].str()}") from exc
    _wait_until_usable(bootstrap, admin, created)
    logger.info("created topics %s", ", ".join(created))
    return created


def _wait_until_usable(
    bootstrap: str, admin: AdminClient, names: list[str], timeout_s: float = 30.0
) -> None:
    """Creation returns before the topics are in the metadata and before their partitions serve
    requests (offset queries answer NOT_LEADER for a moment); wait until each partition answers
    so that callers can use the topics at once."""
    deadline = time.monotonic() + timeout_s
    probe = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "fleetwatch-topic-probe", "log_level": 0}
    )
    try:
        while True:
            topics = admin.list_topics(timeout=10).topics
            missing = [n for n in names if n not in topics or not topics[n].partitions]
            if not missing:
                break
            if time.monotonic() >= deadline:
                raise StackError(
                    f"topics missing from the metadata after {timeout_s:.0f}s: {missing}"
                )
            time.sleep(0.1)
        pending = [TopicPartition(n, p) for n in names for p in topics[n].partitions]
        while pending:
            tp = pending[0]
            try:
                probe.get_watermark_offsets(tp, timeout=5)
                pending.pop(0)
            except KafkaException as exc:
                if time.monotonic() >= deadline:
                    raise StackError(
                        f"topic {tp.topic} partition {tp.partition} unusable: {exc}"
                    ) from exc
                time.sleep(0.1)
    finally:
        probe.close()


def delete_topics(bootstrap: str, names: Iterable[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(list(names), operation_timeout=30).values():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
