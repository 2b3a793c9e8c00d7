"""The Pipeline dashboard: the pipeline's health (each stage scraped or not, the alerts of
deploy/prometheus/rules/ firing), then each stage's throughput, rejects, lag and latency, from
MQTT to the API — the gateway and Mosquitto, the Kafka broker, the scorer and the trainer
(Spark), the API's materialiser, requests, webhooks and commands."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from fleetwatch.observability.panels import PROMETHEUS_SOURCE, RATE, board, prom, series

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
    return (
        board(
            "fleetwatch · Pipeline",
            UID,
            "Every stage from MQTT to the API: throughput, rejects, lag, latency.",
            PROMETHEUS_SOURCE,
        )
        .with_row(dashboard.Row("Pipeline health"))
        .with_panel(
            series(
                "Stages up",
                "1 while every target of the stage answers its scrapes, 0 while one does not "
                "(stopped, crashed or hung): the FleetwatchStageDown alert after a minute.",
                prom(f"min by (job) (up{STAGES})", "{{job}}"),
                span=8,
            )
        )
        .with_panel(
            series(
                "Alerts firing",
                "fleetwatch's alerts firing, by name (deploy/prometheus/rules/; Prometheus' "
                "/alerts page has their labels and descriptions).",
                prom(FIRING, "{{alertname}}"),
                span=8,
            )
        )
        .with_panel(
            series(
                "Scrape duration",
                "How long the slowest target of each stage took to answer a scrape. One "
                "slower than the scrape timeout (3/4 of the interval locally, 10 s in compose "
                "and Kubernetes) is given up: a missing sample, and up reads 0.",
                prom(f"max by (job) (scrape_duration_seconds{STAGES})", "{{job}}"),
                unit="s",
                span=8,
            )
        )
        .with_row(dashboard.Row("Ingest: Mosquitto → gateway → Kafka"))
        .with_panel(
            series(
                "Ingest throughput",
                "MQTT messages the gateway received and readings it accepted into Kafka, and "
                "what Mosquitto itself received (its 1-minute average).",
                prom(rate("fleetwatch_gateway_mqtt_messages_total"), "MQTT messages (gateway)"),
                prom(rate("fleetwatch_gateway_readings_accepted_total"), "readings accepted"),
                prom("max(fleetwatch_mosquitto_messages_received_per_second)", "Mosquitto in"),
                unit="reqps",
                span=8,
            )
        )
        .with_panel(
            series(
                "Rejects by reason",
                "Readings and acks the gateway dead-lettered (telemetry.deadletter), by reason.",
                prom(rate("fleetwatch_gateway_dead_lettered_total", "reason"), "{{reason}}"),
                unit="reqps",
                span=8,
            )
        )
        .with_panel(
            series(
                "Kafka produce latency",
                "From a record handed to the producer to its delivery report.",
                prom(quantile(0.5, "fleetwatch_gateway_produce_latency_seconds"), "p50"),
                prom(quantile(0.99, "fleetwatch_gateway_produce_latency_seconds"), "p99"),
                unit="s",
                span=8,
            )
        )
        .with_panel(
            series(
                "Gateway backlog",
                "MQTT messages not yet all in Kafka (acknowledged to the broker only then), and "
                "records in the producer's queue.",
                prom("sum(fleetwatch_gateway_in_flight_messages)", "in flight"),
                prom("sum(fleetwatch_gateway_producer_queue_records)", "producer queue"),
                span=8,
            )
        )
        .with_panel(
            series(
                "MQTT clients and drops",
                "Clients connected to Mosquitto, and publishes it dropped (a full queue).",
                prom("max(fleetwatch_mosquitto_clients_connected)", "clients"),
                prom(rate("fleetwatch_mosquitto_publish_messages_dropped_total"), "dropped/s"),
                span=8,
            )
        )
        .with_panel(
            series(
                "Gateway connection",
                "1 while the gateway is connected to MQTT; its reconnects.",
                prom("min(fleetwatch_gateway_mqtt_connected)", "connected"),
                prom("sum(fleetwatch_gateway_mqtt_reconnects_total)", "reconnects"),
                span=8,
            )
        )
        .with_row(dashboard.Row("Kafka"))
        .with_panel(
            series(
                "Records in per topic",
                "Records appended per second, the busiest topics.",
                prom(
                    "topk(10, "
                    + rate(
                        "kafka_server_brokertopicmetrics_messagesin_total", "topic", '{topic!=""}'
                    )
                    + ")",
                    "{{topic}}",
                ),
                unit="reqps",
                span=8,
            )
        )
        .with_panel(
            series(
                "Consumer lag (records)",
                "Records not yet read: the scorer's and trainer's Kafka sources (end of the "
                "last micro-batch to the latest offset) and the API's materialiser, per topic.",
                prom(
                    "max by (query, source) (fleetwatch_streaming_source_offsets_behind_latest)",
                    "{{query}} ← {{source}}",
                ),
                prom(
                    "max by (topic) (fleetwatch_api_materialiser_lag_records)",
                    "api ← {{topic}}",
                ),
                span=8,
            )
        )
        .with_panel(
            series(
                "Broker health",
                "Idle share of the request handlers and network threads (near 0: saturated); "
                "under-replicated and offline partitions.",
                prom(
                    "min(kafka_server_kafkarequesthandlerpool_requesthandleravgidle_ratio)",
                    "request handlers idle",
                ),
                prom(
                    "min(kafka_network_socketserver_networkprocessoravgidle_ratio)", "network idle"
                ),
                prom("sum(kafka_cluster_partition_underreplicated)", "under-replicated"),
                prom("max(kafka_controller_kafkacontroller_offlinepartitionscount)", "offline"),
                span=8,
            )
        )
        .with_row(dashboard.Row("Spark: scorer and trainer"))
        .with_panel(
            series(
                "Micro-batch duration p95",
                "Per query (score, train).",
                prom(
                    quantile(0.95, "fleetwatch_streaming_batch_duration_seconds", "query"),
                    "{{query}}",
                ),
                unit="s",
                span=8,
            )
        )
        .with_panel(
            series(
                "Rows processed per second",
                "Of the last micro-batch, per query.",
                prom(
                    "max by (query) (fleetwatch_streaming_processed_rows_per_second)", "{{query}}"
                ),
                unit="reqps",
                span=8,
            )
        )
        .with_panel(
            series(
                "Watermark and event-time lag",
                "Now minus the event-time watermark (grows while a query makes no progress; "
                "the trainer's trails by score.dedup_window, 30 minutes by default), and the "
                "last batch's report time minus its newest event time.",
                prom(
                    "max by (query) (fleetwatch_streaming_watermark_lag_seconds)",
                    "{{query}} watermark",
                ),
                prom(
                    "max by (query) (fleetwatch_streaming_event_time_lag_seconds)",
                    "{{query}} event time",
                ),
                unit="s",
                span=8,
            )
        )
        .with_panel(
            series(
                "Scorer: readings not scored",
                "Late (behind the watermark, to telemetry.late), repeated (dropped), "
                "dead-lettered and of quarantined devices, per second.",
                prom(rate("fleetwatch_score_late_readings_total"), "late"),
                prom(rate("fleetwatch_score_duplicate_readings_total"), "repeated"),
                prom(rate("fleetwatch_score_dead_letters_total"), "dead letters"),
                prom(rate("fleetwatch_score_quarantined_readings_total"), "quarantined"),
                unit="reqps",
                span=8,
            )
        )
        .with_panel(
            series(
                "Scorer state",
                "Keys in the state store, and devices quarantined.",
                prom("sum by (query) (fleetwatch_streaming_state_rows)", "{{query}} state rows"),
                prom("max(fleetwatch_score_quarantined_devices)", "quarantined devices"),
                span=8,
            )
        )
        .with_panel(
            series(
                "Parameter freshness",
                "Seconds since the trainer last published parameters, and since the newest "
                "event time they learned (empty before its first publication).",
                prom("min(fleetwatch_train_params_freshness_seconds)", "since published"),
                prom("min(fleetwatch_train_learned_event_time_lag_seconds)", "since learned"),
                prom(rate("fleetwatch_train_params_published_total"), "published/s"),
                unit="s",
                span=8,
            )
        )
        .with_row(dashboard.Row("API"))
        .with_panel(
            series(
                "Request latency p99",
                "Per route template (Prometheus' own scrapes of /metrics left out).",
                prom(
                    quantile(
                        0.99, "fleetwatch_api_request_seconds", "route", '{route!="/metrics"}'
                    ),
                    "{{route}}",
                ),
                unit="s",
                span=8,
            )
        )
        .with_panel(
            series(
                "Requests per second",
                "By status class.",
                prom(rate("fleetwatch_api_request_seconds_count", "status"), "{{status}}"),
                unit="reqps",
                span=8,
            )
        )
        .with_panel(
            series(
                "Materialiser",
                "Records written to the API's database per second, per topic, and how far "
                "behind (now minus the newest record's Kafka time).",
                prom(rate("fleetwatch_api_materialised_records_total", "topic"), "{{topic}}/s"),
                prom(
                    "max by (topic) (fleetwatch_api_materialiser_lag_seconds)",
                    "{{topic}} behind (s)",
                ),
                span=8,
            )
        )
        .with_panel(
            series(
                "Webhook deliveries",
                "Attempts per second by outcome (failed: retried later; dead: given up), and "
                "the outbox's backlog.",
                prom(rate("fleetwatch_api_webhook_deliveries_total", "outcome"), "{{outcome}}/s"),
                prom('max(fleetwatch_api_webhook_outbox{status="pending"})', "pending"),
                span=12,
            )
        )
        .with_panel(
            series(
                "Command outcomes",
                "Commands issued, sent to Kafka, acknowledged, failed, timed out, per minute.",
                prom(
                    f"60 * {rate('fleetwatch_api_commands_total', 'outcome')}",
                    "{{outcome}}",
                ),
                span=12,
            )
        )
    )
