"""Operators' rules on the real stack: the scorer follows the ``rules`` topic and judges each
rule beside its models — a hard limit on every reading, an average over sliding windows, a
device gone silent — with the alert lifecycle, ids and topic of model alerts; an edit is in
effect for new readings within 5 s without a restart; a deleted rule's episodes resolve; a
record on the topic that is not a rule stops nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from fleetwatch.contracts.alerts import Alert
from fleetwatch.contracts.rules import RuleRecord, encode, rule_key
from fleetwatch.kafka_config import client_config
from tests.integration.conftest import Isolated
from tests.integration.rule_fleet import Fleet, now_ms
from tests.integration.topic_reads import read
from tests.polling import wait_until

EDIT_IN_EFFECT_MS = 5_000


def publish(producer: Producer, topic: str, rule: dict[str, Any], version: int) -> int:
    record = RuleRecord(**rule, version=version, updated_ms=now_ms())
    producer.produce(topic, encode(record), key=rule_key(record.id).encode())
    producer.flush(10)
    return now_ms()


def alerts(isolated: Isolated) -> list[Alert]:
    return [Alert.model_validate_json(r.value) for r in read(isolated, isolated.topics.alerts)]


@pytest.fixture
def fleet(isolated: Isolated) -> Iterator[tuple[Fleet, Producer, list[str]]]:
    producer = Producer(client_config(isolated.settings.kafka))
    devices = [f"r{isolated.tag}-{i}" for i in range(2)]
    with Fleet(producer, isolated.topics.telemetry_raw, devices) as running:
        yield running, producer, devices


HOT = {"id": "hot", "name": "too hot", "severity": "critical", "when": "temperature > 80"}
WARM = {
    "id": "warm",
    "name": "warm on average",
    "when": "avg(temperature) > 50 AND count(*) >= 3",
    "window": {"size": "4 seconds", "slide": "2 seconds"},
}
SILENT = {
    "id": "silent",
    "name": "gone quiet",
    "when": "count(*) = 0",
    "window": {"size": "3 seconds"},
}


def test_rules_alert_edit_in_seconds_and_resolve_on_delete(
    isolated: Isolated, fleet: tuple[Fleet, Producer, list[str]]
) -> None:
    running, producer, (hot, quiet) = fleet
    rules_topic = isolated.topics.rules
    producer.produce(rules_topic, b"{not a rule", key=b"rule:broken")
    for rule in (HOT, WARM, SILENT):
        publish(producer, rules_topic, rule, 1)
    env = {
        **isolated.env,
        "FLEETWATCH_SCORE__ALLOWED_LATENESS": "2 seconds",
        # a slot per partition of telemetry.raw for the real-time query, two for each
        # micro-batch query (the models', the rules')
        "FLEETWATCH_SPARK__MASTER": f"local[{isolated.settings.kafka.partitions + 4}]",
    }
    isolated.start("score", "score", env=env)

    def of(rule: str, device: str, status: str, version: int | None = None) -> list[Alert]:
        return [
            a
            for a in alerts(isolated)
            if a.rule_id == rule
            and a.device_id == device
            and a.status == status
            and (version is None or a.rule_version == version)
        ]

    # both devices read at 21 °C until the rules query has judged a few batches of them
    commits = Path(isolated.env["FLEETWATCH_RUN_DIR"]) / "checkpoints" / "rules-v1" / "commits"
    wait_until(lambda: len(list(commits.glob("[0-9]*"))) >= 3, 240, "the rules query to run")
    assert not alerts(isolated), "nothing fires at 21 °C"
    running.temperature[hot] = 70.0  # warm on average, not over the hard limit of v1
    running.temperature[quiet] = None  # silent from now on
    wait_until(lambda: of("warm", hot, "open"), 60, "the windowed rule to open on the warm device")
    wait_until(lambda: of("silent", quiet, "open"), 120, "the silence rule to open")
    assert not of("hot", hot, "open"), "70 °C is under the hard limit of version 1"
    assert not of("warm", quiet, "open")
    assert not of("silent", hot, "open")

    opened = of("warm", hot, "open")[0]
    assert opened.detector == "rule"
    assert opened.rule_version == 1
    assert opened.value is not None
    assert opened.value > 50
    assert opened.severity == "warning"
    assert opened.metric == "temperature"

    edited_at = publish(producer, rules_topic, {**HOT, "when": "temperature > 60"}, 2)
    wait_until(lambda: of("hot", hot, "open", 2), 60, "the edited hard limit to fire")
    first = of("hot", hot, "open", 2)[0]
    assert first.severity == "critical"
    assert first.value == 70.0
    delay = first.event_ms - edited_at
    assert delay <= EDIT_IN_EFFECT_MS, f"the edit took effect {delay} ms after it was published"

    early = [
        Alert.model_validate_json(r.value) for r in read(isolated, isolated.topics.alerts_fast)
    ]
    fast = [a for a in early if a.rule_id == "hot" and a.device_id == hot]
    assert fast, "the real-time query wrote early opens of the hard limit"
    assert {a.rule_version for a in fast} == {2}
    assert first.alert_id in {a.alert_id for a in fast}, "the early open names the episode"
    assert all(a.value == 70.0 and a.status == "open" for a in fast)

    running.temperature[hot] = 21.0
    wait_until(lambda: of("hot", hot, "resolve"), 60, "the hard limit to resolve on 21 °C")
    wait_until(lambda: of("warm", hot, "resolve"), 60, "the windowed rule to resolve")

    producer.produce(rules_topic, None, key=rule_key("silent").encode())
    producer.flush(10)
    wait_until(lambda: of("silent", quiet, "resolve"), 60, "the deleted rule's episode to resolve")
    resolved = of("silent", quiet, "resolve")[0]
    assert "deleted" in resolved.reason
    assert resolved.alert_id == of("silent", quiet, "open")[0].alert_id

    ids = [a.event_id for a in alerts(isolated)]
    assert len(ids) == len(set(ids)), "every event once"
    assert isolated.procs["score"].poll() is None, "the scorer runs on"
