"""Proof that every panel of every dashboard shows data: the real stages (gateway, scorer,
trainer, API on PostgreSQL) on the test's own topics and ports, scraped by the stack's
Prometheus (``stack/prometheus.py``, with a fresh data dir) through its file_sd targets, a
simulated fleet for about half a minute; then every PromQL query of every panel runs against that
Prometheus' HTTP API and every SQL query (panels, annotations, variables) against the API's
database, with the dashboard's variables and macros substituted. A query with no answer fails
the test, named.

The results (each query, its series or rows and a value) are written to
``dashboards-proof.json`` in the test's run dir."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine

from fleetwatch.contracts.settings import PrometheusSettings, Settings
from fleetwatch.observability import dashboards
from fleetwatch.observability.queries import Query, queries
from fleetwatch.serving.store import Store
from fleetwatch.serving.store.keys import create_key
from fleetwatch.stack.prometheus import PrometheusServer
from tests.integration.api_stack import ApiProcess, start_api
from tests.integration.conftest import Isolated, free_port
from tests.integration.postgres import fresh_database, postgres_server
from tests.polling import wait_until

RATE_INTERVAL = "20s"
BROKER_TOPICS = (
    f'rate(kafka_server_brokertopicmetrics_messagesin_total{{topic!=""}}[{RATE_INTERVAL}])'
)
"""``$__rate_interval`` here: Grafana's is at least four scrape intervals (2 s on the stack)."""
STEP_S = 2
"""The panels' resolution when asked over a time range."""

MUST_MOVE = {
    "fleetwatch-fleet": (
        'panel "Devices online" A',
        'panel "Readings/s" A',
        'panel "Readings per second" B',
        'panel "Alert events per minute" A',
    ),
    "fleetwatch-pipeline": (
        'panel "Ingest throughput" B',
        'panel "Micro-batch duration p95" A',
        'panel "Materialiser" A',
        'panel "Requests per second" A',
        'panel "Webhook deliveries" A',
        'panel "Command outcomes" A',
    ),
}
"""Queries that must show a value above zero somewhere in the window, not only a series: the
run makes readings, alerts, micro-batches, API requests, a webhook delivery and a command."""


SCORER_ACCOUNTED = " + ".join(
    f"sum(fleetwatch_score_{name}_total)"
    for name in ("readings_scored", "late_readings", "duplicate_readings")
)
"""The run's readings the scorer has scored, or set aside as late or repeated: 20 devices of
300 readings each (a reading counted once, however many metrics it has)."""
SCORER_BEHIND = 'sum(fleetwatch_streaming_source_offsets_behind_latest{query="score"})'
"""Records of its Kafka source the scorer has not read at its last progress report."""

SCORER_BORN_LATE = ('fleetwatch_streaming_watermark_lag_seconds{query="score"}',)
"""Scorer series that first exist when a progress report makes them: its first (batch
duration, state rows, offsets behind: the scorer's first micro-batch can end seconds before the
panels are asked), its second (the watermark: Spark reports the epoch for a first batch, which
sets none). The alert events are not among them: each label set reads 0 from the scorer's
start."""
SCRAPES_FOR_A_RATE = 3
"""Scrapes of such a series within ``RATE_INTERVAL`` before the panels are asked: a panel over
the run at a ``STEP_S`` step shows a series from the first step after its first sample, a rate
only at a step with two samples in its window; with three scrapes, the last one seen before
``now``, the panels' last step has two."""


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as server:
        yield server


@dataclass
class Answer:
    dashboard: str
    where: str
    language: str
    query: str
    series: int
    sample: float | str | None
    positive: bool


class Receiver(BaseHTTPRequestHandler):
    """A webhook subscriber that takes every delivery."""

    received: list[bytes] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        Receiver.received.append(self.rfile.read(length))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver")
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def prometheus(isolated: Isolated, tmp_path: Path) -> Iterator[PrometheusServer]:
    """The stack's Prometheus (its code, config and file_sd targets), with a data dir and a port
    of this test's own, scraping the broker and this test's stages: the stack's shared one
    keeps the series of earlier runs, which Prometheus' 5-minute look-back would mix into the
    answers (a previous run's API made "Devices online" read 29 of 21 devices)."""
    settings = Settings(
        run_dir=tmp_path / "prometheus-run", prometheus=PrometheusSettings(port=free_port())
    )
    server = PrometheusServer(settings)
    ports = isolated.metrics_ports
    server.start(
        {
            "gateway": [f"127.0.0.1:{ports['gateway']}"],
            "scorer": [f"127.0.0.1:{ports['score']}"],
            "trainer": [f"127.0.0.1:{ports['train']}"],
            "api": [f"127.0.0.1:{isolated.api_port}"],
        }
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.proc.stop()


def promql(server: PrometheusServer, query: str, path: str, **params: Any) -> list[Any]:
    answer = httpx.get(f"{server.url}/api/v1/{path}", params={"query": query, **params}, timeout=30)
    body = answer.json()
    assert answer.status_code == 200, f"Prometheus refused {query!r}: {body.get('error')}"
    assert body["status"] == "success", body
    result: list[Any] = body["data"]["result"]
    return result


def instant_value(server: PrometheusServer, query: str) -> float:
    result = promql(server, query, "query")
    return float(result[0]["value"][1]) if result else math.nan


def substitute(query: Query, device: str, now: float, since: float) -> str:
    """The query with Grafana's variables and macros as a dashboard over ``since``..``now``
    would send them: ``$__range`` is that whole time range, so it holds all of the run."""
    text = query.text
    if query.language == "promql":
        span = f"{math.ceil(now - since)}s"
        text = text.replace("$__rate_interval", RATE_INTERVAL).replace("$__range", span)
    else:
        text = (
            text.replace("$__unixEpochFrom()", str(int(now) - 3600))
            .replace("$__unixEpochTo()", str(int(now) + 60))
            .replace("$device", device)
        )
    left = re.findall(r"\$\w+", text)
    assert not left, f"{query.dashboard} {query.where}: no substitute for {left} in the test"
    return text


def _number(value: str) -> float:
    return float(value) if value not in ("NaN", "+Inf", "-Inf") else math.nan


def run_promql(
    server: PrometheusServer, query: Query, text: str, now: float, since: float
) -> Answer:
    """The query asked at ``now`` or, for a time series panel, over ``since``..``now``: the
    whole run, however long a slow machine took over it (a command issued early in a run that
    took more than a fixed two minutes had fallen out of a fixed window)."""
    if query.instant:
        result = promql(server, text, "query", time=now)
        values = [_number(r["value"][1]) for r in result]
    else:
        result = promql(server, text, "query_range", start=since, end=now, step=f"{STEP_S}s")
        values = [_number(v) for r in result for _, v in r["values"]]
    finite = [v for v in values if not math.isnan(v)]
    return Answer(
        query.dashboard,
        query.where,
        query.language,
        text,
        len(result),
        finite[-1] if finite else (values[-1] if values else None),
        any(v > 0 for v in finite),
    )


def run_sql(database_url: str, query: Query, text: str) -> Answer:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(text).all()
    finally:
        engine.dispose()
    first = rows[0] if rows else None
    sample = None if first is None else str(tuple(first))[:200]
    return Answer(query.dashboard, query.where, query.language, text, len(rows), sample, bool(rows))


def exported(isolated: Isolated) -> list[dict[str, Any]]:
    """Every ``fleetwatch_*`` metric family each stage serves on its ``/metrics``: stage, name,
    type and label names (written beside the proof, for the record of what is exported)."""
    ports = {**{s: p for s, p in isolated.metrics_ports.items()}, "api": isolated.api_port}
    out = []
    for stage, port in sorted(ports.items()):
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            if not family.name.startswith("fleetwatch_"):
                continue
            labels = sorted({k for sample in family.samples for k in sample.labels} - {"le"})
            out.append({"stage": stage, "name": family.name, "type": family.type, "labels": labels})
    return out


ISSUED = 'fleetwatch_api_commands_total{outcome="issued"}'


def command_between_scrapes(api: ApiProcess, prometheus: PrometheusServer, device: str) -> str:
    """A command issued between two scrapes of the API at most ``RATE_INTERVAL`` apart, so the
    "Command outcomes" panel's rate sees its step. A scrape that times out (2 s) on a loaded
    machine leaves a gap; a one-off 0 → 1 step across a gap wider than the rate's window is in
    no window, and the panel rightly shows nothing. Then it issues another, up to five times.
    Returns the id of the first command."""

    def scraped_after(moment: float, what: str) -> None:
        seen = f"timestamp({ISSUED})"
        wait_until(lambda: instant_value(prometheus, seen) > moment, 60, what)

    ids: list[str] = []
    for attempt in range(5):
        scraped_after(time.time(), "a scrape of the API before the command")
        command = api.post(
            f"/devices/{device}/commands",
            headers={"Idempotency-Key": f"dashboards-{attempt}"},
            json={"name": "reboot"},
        )
        assert command.status_code in (200, 201, 202), command.text
        ids.append(command.json()["command_id"])
        scraped_after(time.time(), "a scrape of the API after the command")
        if instant_value(prometheus, f"increase({ISSUED}[{RATE_INTERVAL}])") > 0:
            return ids[0]
    raise AssertionError(f"no two scrapes of the API within {RATE_INTERVAL} around 5 commands")


def test_every_panel_of_every_dashboard_shows_data(
    isolated: Isolated,
    prometheus: PrometheusServer,
    postgres: str,
    receiver: str,
    tmp_path: Path,
) -> None:
    started = time.time() - 10  # before the first sample any stage exports
    with fresh_database(postgres) as database_url:
        store = Store(database_url)
        with store.session() as session, session.begin():
            _, key = create_key(session, "dashboards-test", ["admin"], 1)
        store.close()
        env = {
            "FLEETWATCH_API__DATABASE_URL": database_url,
            "FLEETWATCH_API__WEBHOOKS__ALLOW_PRIVATE": "true",
            "FLEETWATCH_TRAIN__TRACKING": "false",
            "FLEETWATCH_TRAIN__TRIGGER_INTERVAL": "2 seconds",
        }
        staged = isolated.env | env
        isolated.start("gateway", "gateway", env=staged)
        isolated.start("score", "score", env=staged)
        isolated.start("train", "train", env=staged)
        api = start_api(isolated, key, env=env)
        hook = api.post("/webhooks", json={"url": receiver})
        assert hook.status_code == 201, hook.text
        with isolated.mqtt_client() as client:
            isolated.await_gateway(client)
            root = isolated.mqtt_root
            client.publish(f"{root}/d{isolated.tag}-bad/telemetry", b"{not json", qos=1)
        prefix = f"d{isolated.tag}"
        sim = isolated.start(
            "sim",
            "sim",
            "run",
            "--devices",
            "20",
            "--rate",
            "10",
            "--count",
            "300",
            "--spike-every",
            "37",
            "--prefix",
            prefix,
            "--quiet",
            env=staged,
        )
        device = f"{prefix}-0001"
        wait_until(lambda: api.get(f"/devices/{device}").status_code == 200, 120, "a device")
        command_id = command_between_scrapes(api, prometheus, device)
        assert sim.wait(timeout=150) == 0, "the simulator failed"
        wait_until(
            lambda: api.get(f"/commands/{command_id}").json()["status"] == "acked",
            60,
            "the command acknowledged",
        )
        wait_until(lambda: Receiver.received, 60, "a webhook delivered")
        wait_until(
            lambda: (
                not math.isnan(
                    instant_value(prometheus, "min(fleetwatch_train_params_freshness_seconds)")
                )
            ),
            120,
            "the trainer's first publication, scraped",
        )
        wait_until(
            lambda: instant_value(prometheus, "sum(fleetwatch_api_devices)") >= 20,
            60,
            "the API's devices, scraped",
        )
        wait_until(
            lambda: (
                instant_value(prometheus, SCORER_ACCOUNTED) >= 6000
                and instant_value(prometheus, SCORER_BEHIND) == 0
            ),
            120,
            "the scorer to have scored the whole run, scraped",
        )
        wait_until(
            lambda: all(
                instant_value(prometheus, f"max(count_over_time({series}[{RATE_INTERVAL}]))")
                >= SCRAPES_FOR_A_RATE
                for series in SCORER_BORN_LATE
            ),
            60,
            f"the scorer's progress series scraped {SCRAPES_FOR_A_RATE} times in {RATE_INTERVAL}",
        )
        wait_until(  # two scrapes of the broker 20 s apart at most, each within its timeout
            lambda: bool(promql(prometheus, BROKER_TOPICS, "query")),
            60,
            "the broker's per-topic counters, scraped",
        )
        _ = api.get("/alerts")  # a request the latency panel sees, besides those above
        asked = time.time()
        wait_until(  # a scrape of the API after that request
            lambda: instant_value(prometheus, 'max(timestamp(up{job="api"}))') > asked,
            30,
            "a scrape of the API after the last request",
        )

        top = api.get("/alerts", params={"limit": 1000}).json()["data"]
        counts: dict[str, int] = {}
        for alert in top:
            counts[alert["device_id"]] = counts.get(alert["device_id"], 0) + 1
        assert counts, "the run made alerts"
        busiest = max(counts, key=lambda d: counts[d])

        now = time.time()
        answers = []
        for built in dashboards.models().values():
            for query in queries(built):
                text = substitute(query, busiest, now, started)
                if query.language == "promql":
                    answers.append(run_promql(prometheus, query, text, now, started))
                else:
                    answers.append(run_sql(database_url, query, text))
        (tmp_path / "dashboards-proof.json").write_text(
            json.dumps([asdict(a) for a in answers], indent=2)
        )
        catalogue = exported(isolated)
        (tmp_path / "metrics-catalogue.json").write_text(json.dumps(catalogue, indent=2))

    assert {entry["stage"] for entry in catalogue} == {"gateway", "score", "train", "api"}
    empty = [f"{a.dashboard} {a.where}: {a.query}" for a in answers if a.series == 0]
    assert not empty, "queries with no answer (a metric no stage exports?):\n" + "\n".join(empty)
    still = [
        f"{a.dashboard} {a.where}: {a.query} (last {a.sample})"
        for a in answers
        if a.where in MUST_MOVE.get(a.dashboard, ()) and not a.positive
    ]
    assert not still, "queries that never rose above zero:\n" + "\n".join(still)
    assert len({(a.dashboard, a.where) for a in answers}) == len(answers)
    assert {a.dashboard for a in answers} == {
        "fleetwatch-fleet",
        "fleetwatch-device",
        "fleetwatch-pipeline",
    }
