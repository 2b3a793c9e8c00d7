"""The Pipeline dashboard: the pipeline's health (each stage scraped or not, the alerts of
deploy/prometheus/rules/ firing), then each stage's throughput, rejects, lag and latency, from
MQTT to the API — the gateway and Mosquitto, the Kafka broker, the scorer and the trainer
(Spark), the API's materialiser, requests, webhooks and commands."""

from __future__ import annotations

from collections.abc import Mapping

from grafana_foundation_sdk.builders import dashboard, timeseries

from fleetwatch.observability.panels import PROMETHEUS_SOURCE, RATE, Target, board, prom, series

UID = "fleetwatch-pipeline"
STAGES = '{job=~"gateway|scorer|trainer|api|kafka"}'
"""The scrape jobs of the stages and the broker, as every fleetwatch Prometheus names them."""
FIRING = (
    'sum by (alertname) (ALERTS{alertstate="firing"})'
    ' or on() label_replace(vector(0), "alertname", "none", "", "")'
)
"""Alerts firing by name, or one series ``none`` at 0 when none is: a quiet pipeline shows a
flat line, not an empty panel that could as well be a broken query."""


def rate(metric: str, by: str = "", selector: str = "") -> str:
    summed = f"sum by ({by}) " if by else "sum"
    return f"{summed}(rate({metric}{selector}[{RATE}]))"


def quantile(q: float, histogram: str, by: str = "", selector: str = "") -> str:
    grouping = f"{by}, le" if by else "le"
    return f"histogram_quantile({q}, {rate(f'{histogram}_bucket', grouping, selector)})"


def build() -> dashboard.Dashboard:
    built = board(
        "fleetwatch · Pipeline",
        UID,
        "Every stage from MQTT to the API: throughput, rejects, lag, latency.",
        PROMETHEUS_SOURCE,
    )
    for part in _layout():
        built = built.with_row(part) if isinstance(part, dashboard.Row) else built.with_panel(part)
    return built


def third(title: str, description: str, *targets: Target, unit: str = "short") -> timeseries.Panel:
    """A time series a third of the row wide: this board's panels stand three a row."""
    return series(title, description, *targets, unit=unit, span=8)


def per_second(title: str, description: str, counter: str, by: str) -> timeseries.Panel:
    """``counter``'s rate per second, a series per value of its label ``by``."""
    return third(title, description, prom(rate(counter, by), legend(by)), unit="reqps")


def rates(
    title: str, description: str, counters: Mapping[str, str], *more: Target
) -> timeseries.Panel:
    """Each of ``counters`` (legend → counter) per second, summed; then the ``more`` series."""
    summed = [prom(rate(counter), name) for name, counter in counters.items()]
    return third(title, description, *summed, *more, unit="reqps")


def quantile_by(
    title: str, description: str, q: float, histogram: str, by: str, selector: str = ""
) -> timeseries.Panel:
    """The ``q`` quantile of ``histogram`` (seconds), a series per value of its label ``by``
    (of the series ``selector`` picks)."""
    query = quantile(q, histogram, by, selector)
    return third(title, description, prom(query, legend(by)), unit="s")


def legend(label: str) -> str:
    """A series' legend: the value of its label ``label``."""
    return "{{" + label + "}}"


def _layout() -> list[dashboard.Row | timeseries.Panel]:
    """The board top to bottom: each row, then its panels."""
    return [
        dashboard.Row("Pipeline health"),
        third(
            "Stages up",
            "1 while every target of the stage answers its scrapes, 0 while one does not "
            "(stopped, crashed or hung): the FleetwatchStageDown alert after a minute.",
            prom(f"min by (job) (up{STAGES})", "{{job}}"),
        ),
        third(
            "Alerts firing",
            "fleetwatch's alerts firing, by name (deploy/prometheus/rules/; Prometheus' "
            "/alerts page has their labels and descriptions).",
            prom(FIRING, "{{alertname}}"),
        ),
        third(
            "Scrape duration",
            "How long the slowest target of each stage took to answer a scrape. One "
            "slower than the scrape timeout (3/4 of the interval locally, 10 s in compose "
            "and Kubernetes) is given up: a missing sample, and up reads 0.",
            prom(f"max by (job) (scrape_duration_seconds{STAGES})", "{{job}}"),
            unit="s",
        ),
        dashboard.Row("Ingest: Mosquitto → gateway → Kafka"),
        rates(
            "Ingest throughput",
            "MQTT messages the gateway received and readings it accepted into Kafka, and "
            "what Mosquitto itself received (its 1-minute average).",
            {
                "MQTT messages (gateway)": "fleetwatch_gateway_mqtt_messages_total",
                "readings accepted": "fleetwatch_gateway_readings_accepted_total",
            },
            prom("max(fleetwatch_mosquitto_messages_received_per_second)", "Mosquitto in"),
        ),
        per_second(
            "Rejects by reason",
            "Readings and acks the gateway dead-lettered (telemetry.deadletter), by reason.",
            "fleetwatch_gateway_dead_lettered_total",
            "reason",
        ),
        third(
            "Kafka produce latency",
            "From a record handed to the producer to its delivery report.",
            prom(quantile(0.5, "fleetwatch_gateway_produce_latency_seconds"), "p50"),
            prom(quantile(0.99, "fleetwatch_gateway_produce_latency_seconds"), "p99"),
            unit="s",
        ),
        third(
            "Gateway backlog",
            "MQTT messages not yet all in Kafka (acknowledged to the broker only then), and "
            "records in the producer's queue.",
            prom("sum(fleetwatch_gateway_in_flight_messages)", "in flight"),
            prom("sum(fleetwatch_gateway_producer_queue_records)", "producer queue"),
        ),
        third(
            "MQTT clients and drops",
            "Clients connected to Mosquitto, and publishes it dropped (a full queue).",
            prom("max(fleetwatch_mosquitto_clients_connected)", "clients"),
            prom(rate("fleetwatch_mosquitto_publish_messages_dropped_total"), "dropped/s"),
        ),
        third(
            "Gateway connection",
            "1 while the gateway is connected to MQTT; its reconnects.",
            prom("min(fleetwatch_gateway_mqtt_connected)", "connected"),
            prom("sum(fleetwatch_gateway_mqtt_reconnects_total)", "reconnects"),
        ),
        dashboard.Row("Kafka"),
        third(
            "Records in per topic",
            "Records appended per second, the busiest topics.",
            prom(
                "topk(10, "
                + rate("kafka_server_brokertopicmetrics_messagesin_total", "topic", '{topic!=""}')
                + ")",
                "{{topic}}",
            ),
            unit="reqps",
        ),
        third(
            "Consumer lag (records)",
            "Records not yet read: the scorer's and trainer's Kafka sources (end of the "
            "last micro-batch to the latest offset) and the API's materialiser, per topic.",
            prom(
                "max by (query, source) (fleetwatch_streaming_source_offsets_behind_latest)",
                "{{query}} ← {{source}}",
            ),
            prom("max by (topic) (fleetwatch_api_materialiser_lag_records)", "api ← {{topic}}"),
        ),
        third(
            "Broker health",
            "Idle share of the request handlers and network threads (near 0: saturated); "
            "under-replicated and offline partitions.",
            prom(
                "min(kafka_server_kafkarequesthandlerpool_requesthandleravgidle_ratio)",
                "request handlers idle",
            ),
            prom("min(kafka_network_socketserver_networkprocessoravgidle_ratio)", "network idle"),
            prom("sum(kafka_cluster_partition_underreplicated)", "under-replicated"),
            prom("max(kafka_controller_kafkacontroller_offlinepartitionscount)", "offline"),
        ),
        dashboard.Row("Spark: scorer and trainer"),
        quantile_by(
            "Micro-batch duration p95",
            "Per query (score, train).",
            0.95,
            "fleetwatch_streaming_batch_duration_seconds",
            "query",
        ),
        third(
            "Rows processed per second",
            "Of the last micro-batch, per query.",
            prom("max by (query) (fleetwatch_streaming_processed_rows_per_second)", "{{query}}"),
            unit="reqps",
        ),
        third(
            "Watermark and event-time lag",
            "Now minus the event-time watermark (grows while a query makes no progress; "
            "the trainer's trails by score.dedup_window, 30 minutes by default), and the "
            "last batch's report time minus its newest event time.",
            prom(
                "max by (query) (fleetwatch_streaming_watermark_lag_seconds)", "{{query}} watermark"
            ),
            prom(
                "max by (query) (fleetwatch_streaming_event_time_lag_seconds)",
                "{{query}} event time",
            ),
            unit="s",
        ),
        rates(
            "Scorer: readings not scored",
            "Late (behind the watermark, to telemetry.late), repeated (dropped), "
            "dead-lettered and of quarantined devices, per second.",
            {
                "late": "fleetwatch_score_late_readings_total",
                "repeated": "fleetwatch_score_duplicate_readings_total",
                "dead letters": "fleetwatch_score_dead_letters_total",
                "quarantined": "fleetwatch_score_quarantined_readings_total",
            },
        ),
        third(
            "Scorer state",
            "Keys in the state store, and devices quarantined.",
            prom("sum by (query) (fleetwatch_streaming_state_rows)", "{{query}} state rows"),
            prom("max(fleetwatch_score_quarantined_devices)", "quarantined devices"),
        ),
        third(
            "Parameter freshness",
            "Seconds since the trainer last published parameters, and since the newest "
            "event time they learned (empty before its first publication).",
            prom("min(fleetwatch_train_params_freshness_seconds)", "since published"),
            prom("min(fleetwatch_train_learned_event_time_lag_seconds)", "since learned"),
            prom(rate("fleetwatch_train_params_published_total"), "published/s"),
            unit="s",
        ),
        dashboard.Row("API"),
        quantile_by(
            "Request latency p99",
            "Per route template (Prometheus' own scrapes of /metrics left out).",
            0.99,
            "fleetwatch_api_request_seconds",
            "route",
            '{route!="/metrics"}',
        ),
        per_second(
            "Requests per second",
            "By status class.",
            "fleetwatch_api_request_seconds_count",
            "status",
        ),
        third(
            "Materialiser",
            "Records written to the API's database per second, per topic, and how far "
            "behind (now minus the newest record's Kafka time).",
            prom(rate("fleetwatch_api_materialised_records_total", "topic"), "{{topic}}/s"),
            prom(
                "max by (topic) (fleetwatch_api_materialiser_lag_seconds)", "{{topic}} behind (s)"
            ),
        ),
        series(
            "Webhook deliveries",
            "Attempts per second by outcome (failed: retried later; dead: given up), and "
            "the outbox's backlog.",
            prom(rate("fleetwatch_api_webhook_deliveries_total", "outcome"), "{{outcome}}/s"),
            prom('max(fleetwatch_api_webhook_outbox{status="pending"})', "pending"),
            span=12,
        ),
        series(
            "Command outcomes",
            "Commands issued, sent to Kafka, acknowledged, failed, timed out, per minute.",
            prom(f"60 * {rate('fleetwatch_api_commands_total', 'outcome')}", "{{outcome}}"),
            span=12,
        ),
    ]
