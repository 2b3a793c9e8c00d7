"""Create the topics of DESIGN.md (or any list of specs) idempotently."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
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
        s.name: NewTopic(s.name, num_partitions=partitions, replication_factor=replication, config=s.config)
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
    logger.info("created topics %s", ", ".join(created))
    return created


def delete_topics(bootstrap: str, names: Iterable[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_topics(list(names), operation_timeout=30)
    for future in futures.values():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
