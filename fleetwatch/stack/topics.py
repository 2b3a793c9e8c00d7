"""Create the topics of DESIGN.md (or any list of specs) idempotently.

:func:`create_topics` is the one procedure, over anything with the admin client's calls (an
in-memory fake in the unit tests); :func:`create_on_cluster` runs it against a cluster, for
``fleetwatch topics create`` and, through :func:`ensure_topics`, for the local stack and
replays. The topics themselves, with their configs, are defined once in
:mod:`fleetwatch.contracts.topics`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ClusterMetadata,
    ConfigResource,
    NewTopic,
    ResourceType,
    TopicMetadata,
)

from fleetwatch.contracts.settings import KafkaSettings
from fleetwatch.contracts.topics import TopicSpec
from fleetwatch.kafka_config import client_config
from fleetwatch.stack.errors import StackError

logger = logging.getLogger(__name__)


class TopicAdmin(Protocol):
    """The calls of Kafka's admin client that creating topics makes."""

    def list_topics(self, *args: Any, **kwargs: Any) -> ClusterMetadata: ...

    def create_topics(
        self, new_topics: list[NewTopic], **kwargs: Any
    ) -> dict[str, Future[Any]]: ...

    def describe_configs(
        self, resources: list[ConfigResource], **kwargs: Any
    ) -> dict[ConfigResource, Future[Any]]: ...


@dataclass(frozen=True)
class ExistingTopic:
    """A topic that was there already: left as it is, with how it differs from its spec."""

    name: str
    partitions: int
    replication_factor: int
    differences: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TopicsReport:
    created: list[str]
    existing: list[ExistingTopic]


def create_topics(
    admin: TopicAdmin,
    specs: Iterable[TopicSpec],
    partitions: int,
    replication: int,
    wait: Callable[[list[str]], None],
    inspect: bool = False,
) -> TopicsReport:
    """Create each missing topic with its spec's config, ``partitions`` partitions and
    ``replication`` replicas, then ``wait`` until the created ones serve requests. Existing
    topics are never changed; with ``inspect`` each is compared with its spec (partitions,
    replicas, every config key the spec sets) and the differences reported."""
    wanted = {s.name: s for s in specs}
    metadata = _topics(admin)
    missing = [
        NewTopic(s.name, num_partitions=partitions, replication_factor=replication, config=s.config)
        for name, s in wanted.items()
        if name not in metadata
    ]
    existing = [
        _existing(admin, metadata[name], wanted[name], partitions, replication, inspect)
        for name in wanted
        if name in metadata
    ]
    created: list[str] = []
    raced: list[str] = []  # created by someone else since the listing
    if missing:
        for name, future in admin.create_topics(missing, operation_timeout=30).items():
            try:
                future.result()
                created.append(name)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise StackError(f"cannot create topic {name}: {exc.args[0].str()}") from exc
                raced.append(name)
    if raced:
        metadata = _topics(admin)
        existing.extend(
            _existing(admin, metadata[name], wanted[name], partitions, replication, inspect)
            for name in raced
            if name in metadata
        )
    if created:
        wait(created)
        logger.info("created topics %s", ", ".join(created))
    order = list(wanted)
    created.sort(key=order.index)
    existing.sort(key=lambda t: order.index(t.name))
    return TopicsReport(created, existing)


def create_on_cluster(
    kafka: KafkaSettings,
    specs: Iterable[TopicSpec],
    partitions: int,
    replication: int,
    inspect: bool = False,
) -> TopicsReport:
    """:func:`create_topics` on the cluster of ``kafka``, waiting for what it creates."""
    admin = AdminClient(client_config(kafka))
    return create_topics(
        admin,
        specs,
        partitions,
        replication,
        wait=lambda names: _wait_until_usable(kafka, admin, names),
        inspect=inspect,
    )


def ensure_topics(
    kafka: KafkaSettings, specs: Iterable[TopicSpec], partitions: int, replication: int = 1
) -> list[str]:
    """Create each missing topic; returns the names created. Existing topics are left alone."""
    return create_on_cluster(kafka, specs, partitions, replication).created


def _topics(admin: TopicAdmin) -> dict[str, TopicMetadata]:
    try:
        return dict(admin.list_topics(timeout=10).topics)
    except KafkaException as exc:
        raise StackError(f"Kafka did not answer with its topics: {exc.args[0].str()}") from exc


def _existing(
    admin: TopicAdmin,
    topic: TopicMetadata,
    spec: TopicSpec,
    partitions: int,
    replication: int,
    inspect: bool,
) -> ExistingTopic:
    count = len(topic.partitions)
    replicas = min((len(p.replicas) for p in topic.partitions.values()), default=0)
    differences: list[str] = []
    if inspect:
        if count != partitions:
            differences.append(f"{count} partitions, not {partitions}")
        if replicas != replication:
            differences.append(f"replication factor {replicas}, not {replication}")
        differences.extend(_config_differences(admin, spec))
    return ExistingTopic(spec.name, count, replicas, differences)


def _config_differences(admin: TopicAdmin, spec: TopicSpec) -> list[str]:
    if not spec.config:
        return []
    resource = ConfigResource(ResourceType.TOPIC, spec.name)
    try:
        entries = next(iter(admin.describe_configs([resource]).values())).result()
    except KafkaException as exc:
        return [f"config not readable: {exc.args[0].str()}"]
    out = []
    for key, value in spec.config.items():
        entry = entries.get(key)
        actual = None if entry is None else entry.value
        if actual != value:
            out.append(f"{key}={actual}, not {value}")
    return out


def _wait_until_usable(
    kafka: KafkaSettings, admin: AdminClient, names: list[str], timeout_s: float = 30.0
) -> None:
    """Creation returns before the topics are in the metadata and before their partitions serve
    requests (offset queries answer NOT_LEADER for a moment); wait until each partition answers
    so that callers can use the topics at once."""
    deadline = time.monotonic() + timeout_s
    probe = Consumer(client_config(kafka, {"group.id": "fleetwatch-topic-probe", "log_level": 0}))
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


def delete_topics(kafka: KafkaSettings, names: Iterable[str]) -> None:
    admin = AdminClient(client_config(kafka))
    for future in admin.delete_topics(list(names), operation_timeout=30).values():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
