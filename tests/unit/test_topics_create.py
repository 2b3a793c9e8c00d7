"""Creating the topics on a cluster (`fleetwatch topics create`), against an in-memory admin
client that behaves as Kafka's does: it refuses a topic that exists and a replication factor
larger than its brokers, and answers configs with the broker defaults where a topic set none."""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    PartitionMetadata,
    TopicMetadata,
)
from typer.testing import CliRunner

from fleetwatch.cli import topics as topics_cli
from fleetwatch.cli.main import app
from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.topics import TopicSpec, topic_specs
from fleetwatch.stack import topics
from fleetwatch.stack.errors import StackError

BROKER_DEFAULTS = {"cleanup.policy": "delete", "retention.ms": "604800000"}


@dataclass
class Topic:
    partitions: int
    replicas: int
    config: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeAdmin:
    """An in-memory cluster of ``brokers`` brokers."""

    brokers: int = 1
    topics: dict[str, Topic] = field(default_factory=dict)
    reachable: bool = True
    appear_meanwhile: dict[str, Topic] = field(default_factory=dict)
    """Topics someone else creates between our listing and our creation."""
    create_calls: list[list[str]] = field(default_factory=list)

    def list_topics(self, *args: Any, **kwargs: Any) -> ClusterMetadata:
        if not self.reachable:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down (test)"))
        metadata = ClusterMetadata()
        for name, topic in self.topics.items():
            meta = TopicMetadata()
            meta.topic = name
            for index in range(topic.partitions):
                partition = PartitionMetadata()
                partition.id = index
                partition.replicas = list(range(topic.replicas))
                meta.partitions[index] = partition
            metadata.topics[name] = meta
        return metadata

    def create_topics(self, new_topics: list[NewTopic], **kwargs: Any) -> dict[str, Future[Any]]:
        self.create_calls.append([t.topic for t in new_topics])
        self.topics.update(self.appear_meanwhile)
        out: dict[str, Future[Any]] = {}
        for new in new_topics:
            future: Future[Any] = Future()
            if new.topic in self.topics:
                future.set_exception(
                    KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "exists"))
                )
            elif new.replication_factor > self.brokers:
                reason = f"Replication factor: {new.replication_factor} larger than brokers"
                future.set_exception(
                    KafkaException(KafkaError(KafkaError.INVALID_REPLICATION_FACTOR, reason))
                )
            else:
                config = dict(new.config or {})
                self.topics[new.topic] = Topic(new.num_partitions, new.replication_factor, config)
                future.set_result(None)
            out[new.topic] = future
        return out

    def describe_configs(
        self, resources: list[ConfigResource], **kwargs: Any
    ) -> dict[ConfigResource, Future[Any]]:
        out: dict[ConfigResource, Future[Any]] = {}
        for resource in resources:
            values = BROKER_DEFAULTS | self.topics[resource.name].config
            future: Future[Any] = Future()
            future.set_result({k: ConfigEntry(k, v) for k, v in values.items()})
            out[resource] = future
        return out


class Waits:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, names: list[str]) -> None:
        self.calls.append(list(names))


SPECS = topic_specs(Settings().topics)
NAMES = [s.name for s in SPECS]
COMPACTED = {s.name for s in SPECS if "compact" in s.config.get("cleanup.policy", "")}


def test_an_empty_cluster_gets_every_topic_with_its_config() -> None:
    admin, waits = FakeAdmin(brokers=3), Waits()
    report = topics.create_topics(admin, SPECS, partitions=6, replication=3, wait=waits)
    assert report.created == NAMES
    assert report.existing == []
    assert waits.calls == [NAMES]  # what was created is usable before the call returns
    for spec in SPECS:
        topic = admin.topics[spec.name]
        assert (topic.partitions, topic.replicas) == (6, 3)
        assert topic.config == spec.config
    compacted = {
        n for n, t in admin.topics.items() if "compact" in t.config.get("cleanup.policy", "")
    }
    assert (
        compacted
        == COMPACTED
        == {"model.params", "device.quarantine-lifts", "device.state", "device.sessions", "rules"}
    )
    # sessions are history: each compacted to its last record, and deleted after a retention
    assert admin.topics["device.sessions"].config["cleanup.policy"] == "compact,delete"


def test_a_second_run_creates_nothing_and_reports_every_topic_as_there() -> None:
    admin, waits = FakeAdmin(), Waits()
    topics.create_topics(admin, SPECS, partitions=4, replication=1, wait=waits)
    again = topics.create_topics(admin, SPECS, 4, 1, wait=waits, inspect=True)
    assert again.created == []
    assert [t.name for t in again.existing] == NAMES
    assert all(t.differences == [] for t in again.existing), again.existing
    assert all((t.partitions, t.replication_factor) == (4, 1) for t in again.existing)
    assert len(admin.create_calls) == 1  # the second run asked Kafka to create nothing
    assert len(waits.calls) == 1


def test_an_existing_topic_is_left_as_it_is_and_how_it_differs_is_reported() -> None:
    admin = FakeAdmin(topics={"model.params": Topic(partitions=2, replicas=1)})
    report = topics.create_topics(admin, SPECS, 4, 1, wait=Waits(), inspect=True)
    assert "model.params" not in report.created
    assert len(report.created) == len(NAMES) - 1
    (existing,) = report.existing
    assert existing.name == "model.params"
    assert existing.partitions == 2
    assert existing.differences == [
        "2 partitions, not 4",
        "cleanup.policy=delete, not compact",
        "min.compaction.lag.ms=None, not 0",
    ]
    assert admin.topics["model.params"] == Topic(partitions=2, replicas=1)  # untouched


def test_without_inspect_existing_topics_are_not_compared() -> None:
    """The local stack and replays only want the topics there: no config look-ups."""
    admin = FakeAdmin(topics={"model.params": Topic(partitions=2, replicas=1)})
    report = topics.create_topics(admin, SPECS, 4, 1, wait=Waits())
    assert report.existing[0].differences == []


def test_a_topic_someone_creates_meanwhile_is_reported_as_existing_not_as_an_error() -> None:
    raced = Topic(4, 1, {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"})
    admin, waits = FakeAdmin(appear_meanwhile={"device.state": raced}), Waits()
    report = topics.create_topics(admin, SPECS, 4, 1, wait=waits, inspect=True)
    assert "device.state" not in report.created
    assert [(t.name, t.differences) for t in report.existing] == [("device.state", [])]
    assert waits.calls == [[n for n in NAMES if n != "device.state"]]


def test_a_replication_factor_the_cluster_cannot_hold_fails_with_the_reason() -> None:
    with pytest.raises(StackError, match=r"cannot create topic .*Replication factor: 3"):
        topics.create_topics(FakeAdmin(brokers=1), SPECS, 4, 3, wait=Waits())


def test_a_cluster_that_does_not_answer_is_a_stack_error() -> None:
    with pytest.raises(StackError, match="did not answer"):
        topics.create_topics(FakeAdmin(reachable=False), SPECS, 4, 1, wait=Waits())


def test_only_the_given_specs_are_created() -> None:
    admin = FakeAdmin()
    spec = TopicSpec("alerts.replay", "device_id", {"retention.ms": "1000"})
    report = topics.create_topics(admin, [spec], 1, 1, wait=Waits())
    assert report.created == ["alerts.replay"]
    assert list(admin.topics) == ["alerts.replay"]


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeAdmin, list[dict[str, str]], Waits]:
    """The CLI against the fake: the admin client it builds, its config, the waits."""
    admin, configs, waits = FakeAdmin(brokers=2), [], Waits()

    def make(config: dict[str, str]) -> FakeAdmin:
        configs.append(config)
        return admin

    monkeypatch.setattr(topics, "AdminClient", make)
    monkeypatch.setattr(topics, "_wait_until_usable", lambda _b, _a, names: waits(names))
    monkeypatch.setattr(topics_cli.console, "width", 250)
    return admin, configs, waits


def test_the_command_creates_the_topics_where_and_as_told(
    cluster: tuple[FakeAdmin, list[dict[str, str]], Waits],
) -> None:
    admin, configs, waits = cluster
    args = ["topics", "create", "--bootstrap", "kafka-0.kafka:9092", "--partitions", "12"]
    result = CliRunner().invoke(app, [*args, "--replication-factor", "2"])
    assert result.exit_code == 0, result.output
    assert configs == [{"bootstrap.servers": "kafka-0.kafka:9092"}]
    assert {(t.partitions, t.replicas) for t in admin.topics.values()} == {(12, 2)}
    assert waits.calls == [NAMES]
    assert "12 created, 0 already there, on kafka-0.kafka:9092" in result.output
    assert "cleanup.policy=compact" in result.output


def test_the_command_twice_reports_the_topics_and_succeeds(
    cluster: tuple[FakeAdmin, list[dict[str, str]], Waits],
) -> None:
    admin, _, _ = cluster
    admin.topics["alerts"] = Topic(partitions=1, replicas=1)
    runner = CliRunner()
    first = runner.invoke(app, ["topics", "create", "--partitions", "4"])
    assert first.exit_code == 0, first.output
    assert "11 created, 1 already there" in first.output
    assert "exists, differs" in first.output
    assert "1 partitions, not 4; retention.ms=604800000, not 7776000000" in first.output
    second = runner.invoke(app, ["topics", "create", "--partitions", "4"])
    assert second.exit_code == 0, second.output
    assert "0 created, 12 already there" in second.output


def test_the_command_reports_as_one_json_document(
    cluster: tuple[FakeAdmin, list[dict[str, str]], Waits],
) -> None:
    admin, _, _ = cluster
    admin.topics["alerts"] = Topic(partitions=1, replicas=1)
    result = CliRunner().invoke(app, ["topics", "create", "--partitions", "4", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)  # nothing else on stdout
    assert len(document["created"]) == 11
    assert {c["partitions"] for c in document["created"]} == {4}
    created = {c["topic"]: c["config"] for c in document["created"]}
    assert created["device.sessions"]["cleanup.policy"] == "compact,delete"
    [alerts] = document["existing"]
    assert alerts["topic"] == "alerts"
    assert "1 partitions, not 4" in alerts["differences"]


def test_the_command_takes_its_defaults_from_the_settings(
    cluster: tuple[FakeAdmin, list[dict[str, str]], Waits], monkeypatch: pytest.MonkeyPatch
) -> None:
    admin, configs, _ = cluster
    monkeypatch.setenv("FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS", "kafka:9092")
    monkeypatch.setenv("FLEETWATCH_KAFKA__PARTITIONS", "3")
    monkeypatch.setenv("FLEETWATCH_KAFKA__REPLICATION_FACTOR", "2")
    monkeypatch.setenv("FLEETWATCH_TOPICS__ALERTS", "alerts.v2")
    result = CliRunner().invoke(app, ["topics", "create"])
    assert result.exit_code == 0, result.output
    assert configs == [{"bootstrap.servers": "kafka:9092"}]
    assert "alerts.v2" in admin.topics
    assert "alerts" not in admin.topics
    assert {(t.partitions, t.replicas) for t in admin.topics.values()} == {(3, 2)}


def test_the_command_fails_with_the_reason_when_topics_cannot_be_made(
    cluster: tuple[FakeAdmin, list[dict[str, str]], Waits],
) -> None:
    result = CliRunner().invoke(app, ["topics", "create", "--replication-factor", "3"])
    assert result.exit_code == 1
    assert "cannot create topic" in result.output
    assert "Replication factor: 3" in result.output
