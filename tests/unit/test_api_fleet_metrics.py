"""The fleet's figures on the API's /metrics, read from its database at each scrape: every
label value of each bounded set present (zeros included), never a device id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.contracts.alerts import ALERT_KINDS, RULE_KIND, SEVERITIES
from fleetwatch.serving.fleet_metrics import COMMAND_STATUSES, DEVICE_STATUSES
from tests.unit.api_support import Api, make_alert, running_api
from tests.unit.test_api import feed, state


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from running_api(tmp_path)


def figures(api: Api) -> tuple[str, dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    text = api.client.get("/metrics").text
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return text, samples


def test_devices_alerts_commands_and_outbox_are_counted_from_the_database(api: Api) -> None:
    feed(
        api.store,
        states=[
            state("dev-ok", 1_000),
            state("dev-alerting", 1_000, "alerting"),
            state("dev-silent", 1_000, "silent"),
        ],
        alerts=[
            make_alert("dev-alerting", 1, 1_000, severity="critical"),
            make_alert("dev-alerting", 2, 2_000, metric="humidity"),
            make_alert("dev-ok", 3, 1_000, "resolve", 1, start_ms=500),
            # an operator's rule: on the Fleet dashboard's open alerts as kind "rule"
            make_alert("dev-alerting", 4, 3_000, metric="vibration").model_copy(
                update={"detector": RULE_KIND, "rule_id": "shaky", "rule_version": 2}
            ),
        ],
    )
    api.post("/devices", json={"device_id": "dev-registered"})  # no state yet: unknown
    api.post(
        "/devices/dev-ok/commands",
        scope="operate",
        headers={"Idempotency-Key": "k1"},
        json={"name": "reboot"},
    )
    text, samples = figures(api)

    devices = {
        dict(labels)["status"]: v
        for (n, labels), v in samples.items()
        if n == "fleetwatch_api_devices"
    }
    assert devices == {"ok": 1, "alerting": 1, "silent": 1, "quarantined": 0, "unknown": 1}
    assert set(devices) == set(DEVICE_STATUSES)

    open_alerts = {
        (dict(labels)["severity"], dict(labels)["kind"]): v
        for (n, labels), v in samples.items()
        if n == "fleetwatch_api_open_alerts"
    }
    assert len(open_alerts) == len(SEVERITIES) * len(ALERT_KINDS), "every pair, zeros included"
    assert open_alerts[("critical", "fixed-baseline")] == 1
    assert open_alerts[("warning", "fixed-baseline")] == 1, "the resolved one is not open"
    assert open_alerts[("warning", RULE_KIND)] == 1
    assert sum(open_alerts.values()) == 3

    commands = {
        dict(labels)["status"]: v
        for (n, labels), v in samples.items()
        if n == "fleetwatch_api_commands_by_status"
    }
    assert set(commands) == set(COMMAND_STATUSES)
    assert sum(commands.values()) == 1
    outbox = {
        dict(labels)["status"]: v
        for (n, labels), v in samples.items()
        if n == "fleetwatch_api_webhook_outbox"
    }
    assert outbox == {"pending": 0, "delivered": 0, "dead": 0}
    assert samples[("fleetwatch_api_webhook_oldest_pending_seconds", frozenset())] == 0
    assert ("fleetwatch_api_fleet_query_seconds", frozenset()) in samples
    assert "dev-" not in text, "never a device id in a label"


def test_outcome_counters_exist_at_zero_before_the_first_event(api: Api) -> None:
    _, samples = figures(api)
    for outcome in ("issued", "sent", "acked", "failed", "timed_out", "late_ack"):
        assert samples[("fleetwatch_api_commands_total", frozenset({("outcome", outcome)}))] == 0
    for outcome in ("delivered", "failed", "dead"):
        key = ("fleetwatch_api_webhook_deliveries_total", frozenset({("outcome", outcome)}))
        assert samples[key] == 0
