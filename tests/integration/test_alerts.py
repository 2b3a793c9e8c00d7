"""The alerting rules on a real Prometheus against the real scorer: the stack's Prometheus (its
code and rendered config, with a port and data dir of this test's own) evaluates
deploy/prometheus/rules/ — FleetwatchStageDown's ``for:`` shortened from a minute to a few
seconds, nothing else changed — and scrapes the scorer. The scorer runs (its Spark session up);
it is stopped, and the alert fires for it; it runs again, and the alert resolves."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from fleetwatch.contracts.settings import PrometheusSettings, Settings
from fleetwatch.stack.prometheus import PrometheusServer
from tests.integration.conftest import Isolated, free_port
from tests.polling import wait_until

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules"
ALERT = "FleetwatchStageDown"
SHORT_FOR = "2s"
"""One of the stack's 2 s evaluations: the alert is pending at the evaluation that first sees
the scorer down and firing at the next, seconds after its last scrape (the deployed rule waits
a minute)."""
SESSION_UP = 'count(fleetwatch_score_quarantined_devices{job="scorer"})'
"""1 once a scrape of the running scorer has its own metrics, which it registers when its
Spark session is up (before that, its /metrics answers with none); no answer while it is
down (the series is stale from the first failed scrape)."""


def rules_with_short_stage_down(directory: Path) -> Path:
    """deploy/prometheus/rules/ written to ``directory``, the stage-down alert's ``for:`` set to
    :data:`SHORT_FOR`."""
    directory.mkdir(parents=True)
    changed = 0
    for path in sorted(RULES.glob("*.yml")):
        loaded = yaml.safe_load(path.read_text())
        for group in loaded["groups"]:
            for rule in group["rules"]:
                if rule.get("alert") == ALERT:
                    rule["for"] = SHORT_FOR
                    changed += 1
        (directory / path.name).write_text(yaml.safe_dump(loaded, sort_keys=False))
    assert changed == 1, f"{ALERT} is defined {changed} times"
    return directory


@pytest.fixture
def prometheus(isolated: Isolated, tmp_path: Path) -> Iterator[PrometheusServer]:
    """A Prometheus of this test's own scraping this test's scorer (and the stack's broker),
    with the rules of :func:`rules_with_short_stage_down`."""
    settings = Settings(
        run_dir=tmp_path / "prometheus-run",
        prometheus=PrometheusSettings(
            port=free_port(), rules_dir=rules_with_short_stage_down(tmp_path / "rules")
        ),
    )
    server = PrometheusServer(settings)
    scorer = f"127.0.0.1:{isolated.metrics_ports['score']}"
    server.start({"scorer": [scorer], "gateway": [], "trainer": [], "api": []})
    try:
        server.wait_ready()
        yield server
    finally:
        server.proc.stop()


def value(server: PrometheusServer, query: str) -> float:
    body = httpx.get(f"{server.url}/api/v1/query", params={"query": query}, timeout=10).json()
    assert body["status"] == "success", body
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else math.nan


def stage_down(server: PrometheusServer, state: str | None = None) -> list[dict[str, Any]]:
    """The scorer's stage-down alerts Prometheus holds (pending or firing), or those in
    ``state``."""
    body = httpx.get(f"{server.url}/api/v1/alerts", timeout=10).json()
    assert body["status"] == "success", body
    return [
        alert
        for alert in body["data"]["alerts"]
        if alert["labels"].get("alertname") == ALERT
        and alert["labels"].get("job") == "scorer"
        and (state is None or alert["state"] == state)
    ]


def test_the_scorer_stopped_fires_its_stage_down_alert_and_running_again_resolves_it(
    isolated: Isolated, prometheus: PrometheusServer
) -> None:
    loaded = httpx.get(f"{prometheus.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    names = {rule["name"] for group in loaded for rule in group["rules"]}
    assert {ALERT, "FleetwatchStreamingNoProgress", "FleetwatchMqttDisconnected"} <= names

    isolated.start("score", "score")
    wait_until(lambda: value(prometheus, SESSION_UP) == 1, 180, "the running scorer scraped")
    assert value(prometheus, 'up{job="scorer"}') == 1
    assert not stage_down(prometheus), "no alert for a scorer that runs"

    isolated.stop("score")
    (fired,) = wait_until(
        lambda: stage_down(prometheus, "firing"), 60, f"{ALERT} firing for the stopped scorer"
    )
    assert fired["labels"]["severity"] == "critical"
    assert fired["labels"]["instance"] == f"127.0.0.1:{isolated.metrics_ports['score']}"
    assert fired["annotations"]["summary"].startswith("scorer is down")
    assert float(fired["value"]) == 0  # up

    isolated.start("score", "score")
    wait_until(lambda: not stage_down(prometheus), 60, f"{ALERT} resolved for the scorer")
    assert value(prometheus, 'up{job="scorer"}') == 1
    # and it runs again: its Spark session is up before the fixture stops it
    wait_until(lambda: value(prometheus, SESSION_UP) == 1, 180, "the restarted scorer scraped")
