"""Operators' rules from end to end on the real stack: written through the API (checked by
Spark), followed by the scorer and judged beside its models — a hard limit on every reading, an
average over sliding windows, a device gone silent — with the alert lifecycle, ids and topic of
model alerts; an edit in effect for new readings within 5 s without a restart, with early opens
from the real-time query; alerts on a subscriber's webhook (one episode, once), in
``GET /alerts?rule_id=`` and on the Fleet dashboard's open alerts; a deleted rule's episodes
resolve; a record on the rules topic that is not a rule stops nothing. (The CLI's ``rules
apply | delete`` is shown in test_api_rules, ``rules test`` in tests/spark/test_rules_file.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.contracts.alerts import Alert
from fleetwatch.kafka_config import client_config
from tests.integration.api_stack import ApiProcess, admin_key, start_api
from tests.integration.conftest import Isolated, free_port
from tests.integration.rule_fleet import Fleet, now_ms
from tests.integration.test_api_webhooks import Receiver
from tests.integration.topic_reads import read
from tests.polling import wait_until

EDIT_IN_EFFECT_MS = 5_000


def put(api: ApiProcess, rule: dict[str, Any]) -> int:
    """PUT the rule; the time the API answered (it has published the record then)."""
    response = httpx.put(
        f"{api.base}/rules/{rule['id']}", json=rule, headers={"X-API-Key": api.key}, timeout=180
    )
    assert response.status_code in (200, 201), response.text
    return now_ms()


def alerts(isolated: Isolated) -> list[Alert]:
    return [Alert.model_validate_json(r.value) for r in read(isolated, isolated.topics.alerts)]


@pytest.fixture
def fleet(isolated: Isolated) -> Iterator[tuple[Fleet, Producer, list[str]]]:
    producer = Producer(client_config(isolated.settings.kafka))
    devices = [f"r{isolated.tag}-{i}" for i in range(2)]
    with Fleet(producer, isolated.topics.telemetry_raw, devices) as running:
        yield running, producer, devices


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(free_port())
    r.start()
    yield r
    r.stop()


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


def test_rules_through_the_api_alert_edit_in_seconds_and_resolve_on_delete(
    isolated: Isolated, fleet: tuple[Fleet, Producer, list[str]], receiver: Receiver
) -> None:
    running, producer, (hot, quiet) = fleet
    producer.produce(isolated.topics.rules, b"{not a rule", key=b"rule:broken")
    env = {
        **isolated.env,
        "FLEETWATCH_SCORE__ALLOWED_LATENESS": "2 seconds",
        # a slot per partition of telemetry.raw for the real-time query, two for each
        # micro-batch query (the models', the rules')
        "FLEETWATCH_SPARK__MASTER": f"local[{isolated.settings.kafka.partitions + 4}]",
    }
    isolated.start("score", "score", env=env)
    api = start_api(
        isolated,
        admin_key(Path(isolated.env["FLEETWATCH_RUN_DIR"])),
        env={"FLEETWATCH_API__WEBHOOKS__ALLOW_PRIVATE": "true"},
    )
    hook = api.post(
        "/webhooks", json={"url": f"http://127.0.0.1:{receiver.port}/h", "devices": [hot]}
    )
    assert hook.status_code == 201, hook.text
    for rule in (HOT, WARM, SILENT):
        put(api, rule)  # the first waits for the API's checker to start

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

    edited_at = put(api, {**HOT, "when": "temperature > 60"})
    wait_until(lambda: of("hot", hot, "open", 2), 60, "the edited hard limit to fire")
    first = of("hot", hot, "open", 2)[0]
    assert first.severity == "critical"
    assert first.value == 70.0
    delay = first.event_ms - edited_at
    assert delay <= EDIT_IN_EFFECT_MS, f"the edit took effect {delay} ms after the API took it"

    early = [
        Alert.model_validate_json(r.value) for r in read(isolated, isolated.topics.alerts_fast)
    ]
    fast = [a for a in early if a.rule_id == "hot" and a.device_id == hot]
    assert fast, "the real-time query wrote early opens of the hard limit"
    assert {a.rule_version for a in fast} == {2}
    assert first.alert_id in {a.alert_id for a in fast}, "the early open names the episode"
    assert all(a.value == 70.0 and a.status == "open" for a in fast)

    def delivered() -> set[tuple[str, str]]:
        bodies = [json.loads(b) for _, b in receiver.received]
        return {(b["type"], b["data"]["alert_id"]) for b in bodies if b["data"].get("rule_id")}

    wait_until(lambda: ("alert.open", first.alert_id) in delivered(), 60, "the open's webhook")
    listed = api.get("/alerts", params={"rule_id": "hot"}).json()["data"]
    assert first.alert_id in {a["alert_id"] for a in listed if a["state"] == "open"}
    open_rule_alerts = sum(
        s.value
        for family in text_string_to_metric_families(api.get("/metrics").text)
        for s in family.samples
        if s.name == "fleetwatch_api_open_alerts" and s.labels.get("kind") == "rule"
    )
    assert open_rule_alerts >= 2, "the Fleet dashboard's open alerts of kind rule"

    running.temperature[hot] = 21.0
    wait_until(lambda: of("hot", hot, "resolve"), 60, "the hard limit to resolve on 21 °C")
    wait_until(lambda: of("warm", hot, "resolve"), 60, "the windowed rule to resolve")

    assert httpx.delete(f"{api.base}/rules/silent", headers={"X-API-Key": api.key}).is_success
    wait_until(lambda: of("silent", quiet, "resolve"), 60, "the deleted rule's episode to resolve")
    resolved = of("silent", quiet, "resolve")[0]
    assert "deleted" in resolved.reason
    assert resolved.alert_id == of("silent", quiet, "open")[0].alert_id

    ids = [a.event_id for a in alerts(isolated)]
    assert len(ids) == len(set(ids)), "every event once"
    wait_until(
        lambda: ("alert.resolve", first.alert_id) in delivered(), 60, "the resolve's webhook"
    )
    opened_ids = {a for kind, a in delivered() if kind == "alert.open"}
    withdrawn = {a for kind, a in delivered() if kind == "alert.withdraw"}
    # warm and hot v2 on the subscribed device: one episode each, net of early opens withdrawn
    assert len(opened_ids - withdrawn) == 2, delivered()
    hooks = [h["webhook-id"] for h, _ in receiver.received]
    assert len(hooks) == len(set(hooks)), "every event delivered once"
    assert isolated.procs["score"].poll() is None, "the scorer runs on"
