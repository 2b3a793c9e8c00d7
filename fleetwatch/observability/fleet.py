"""The Fleet dashboard: how many devices are online, silent or quarantined, what they send, which
alerts are open and which devices alert most."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard, table
from grafana_foundation_sdk.models import dashboard as model

from fleetwatch.observability.panels import (
    DATABASE_SOURCE,
    PROMETHEUS_SOURCE,
    RATE,
    board,
    grid,
    prom,
    series,
    single,
    sql,
)

UID = "fleetwatch-fleet"

# Every API replica serves the same fleet figures (they are the database's): max, not sum.
DEVICES = "max by (status) (fleetwatch_api_devices)"
OPEN_ALERTS = "max by (severity, kind) (fleetwatch_api_open_alerts)"
ACCEPTED = f"sum(rate(fleetwatch_gateway_readings_accepted_total[{RATE}]))"
SCORED = f"sum(rate(fleetwatch_score_readings_scored_total[{RATE}]))"
OPENED = f'sum(rate(fleetwatch_score_alert_events_total{{event="open"}}[{RATE}]))'

TOP_DEVICES = """
SELECT a.device_id AS device,
       count(*) AS alerts,
       count(*) FILTER (WHERE a.state = 'open') AS open,
       count(*) FILTER (WHERE a.severity = 'critical') AS critical,
       to_timestamp(max(a.start_ms) / 1000.0) AS latest
FROM alerts a
WHERE a.start_ms BETWEEN $__unixEpochFrom()::bigint * 1000 AND $__unixEpochTo()::bigint * 1000
GROUP BY a.device_id
ORDER BY alerts DESC, a.device_id
LIMIT 15
"""

WORST_FIRST = """
SELECT d.device_id AS device,
       coalesce(s.status, 'unknown') AS status,
       to_timestamp(s.last_seen_ms / 1000.0) AS last_seen,
       json_array_length(s.open_alerts) AS open_alerts,
       d.kind
FROM devices d
LEFT JOIN device_state s ON s.device_id = d.device_id
ORDER BY CASE coalesce(s.status, 'unknown')
           WHEN 'quarantined' THEN 0 WHEN 'alerting' THEN 1 WHEN 'silent' THEN 2
           WHEN 'unknown' THEN 3 ELSE 4 END,
         s.last_seen_ms NULLS FIRST, d.device_id
LIMIT 50
"""

DEVICE_LINKS = model.DynamicConfigValue(
    id_val="links",
    value=[
        {
            "title": "Device dashboard",
            "url": "/d/fleetwatch-device?var-device=${__value.raw}&${database:queryparam}"
            "&${__url_time_range}",
        }
    ],
)
"""A device id in a table opens the Device dashboard on that device, same database and time
range."""


def device_table(title: str, description: str, query: str) -> table.Panel:
    """A half-width table of the API's database with one row per device, whose device id
    opens the Device dashboard (:data:`DEVICE_LINKS`)."""
    return grid(title, description, sql(query), span=12, height=10).override_by_name(
        "device", [DEVICE_LINKS]
    )


def build() -> dashboard.Dashboard:
    top = device_table(
        "Top devices by alerts",
        "Alert episodes that started in the time range, per device (from the API's database: "
        "a device id is never a Prometheus label). Click a device for its dashboard.",
        TOP_DEVICES,
    )
    worst = device_table(
        "Devices, worst first",
        "Quarantined, alerting, silent, not yet seen by the scorer, then the rest, least "
        "recently seen first.",
        WORST_FIRST,
    )
    return (
        board(
            "fleetwatch · Fleet",
            UID,
            "Devices, readings and alerts of the whole fleet.",
            PROMETHEUS_SOURCE,
            DATABASE_SOURCE,
        )
        .with_row(dashboard.Row("Now"))
        .with_panel(
            single(
                "Devices online",
                "Devices whose latest state is ok or alerting.",
                prom('sum(max by (status) (fleetwatch_api_devices{status=~"ok|alerting"}))'),
            )
        )
        .with_panel(
            single(
                "Silent",
                "Devices with no reading for longer than score.session_gap_s (event time).",
                prom('max(fleetwatch_api_devices{status="silent"})'),
                thresholds=[(None, "green"), (1, "orange")],
            )
        )
        .with_panel(
            single(
                "Quarantined",
                "Devices the scorer quarantined after repeated failures (lift through the API).",
                prom('max(fleetwatch_api_devices{status="quarantined"})'),
                thresholds=[(None, "green"), (1, "red")],
            )
        )
        .with_panel(
            single(
                "Open alerts",
                "Open alert episodes in the API's database.",
                prom(f"sum({OPEN_ALERTS})"),
                thresholds=[(None, "green"), (1, "orange")],
            )
        )
        .with_panel(
            single(
                "Readings/s",
                "Readings the gateway accepted into Kafka, per second.",
                prom(ACCEPTED),
                unit="reqps",
            )
        )
        .with_panel(
            single(
                "Anomaly rate",
                "Alerts opened per reading scored, over the time range.",
                prom(
                    'sum(increase(fleetwatch_score_alert_events_total{event="open"}[$__range]))'
                    " / sum(increase(fleetwatch_score_readings_scored_total[$__range]))"
                ),
                unit="percentunit",
            )
        )
        .with_row(dashboard.Row("Over time"))
        .with_panel(
            series(
                "Devices by status",
                "ok, alerting, silent, quarantined; unknown: registered or seen, no state yet.",
                prom(DEVICES, "{{status}}"),
            )
        )
        .with_panel(
            series(
                "Readings per second",
                "Accepted by the gateway and scored by the scorer: the gap is what is on its "
                "way (or late, or repeated).",
                prom(ACCEPTED, "accepted"),
                prom(SCORED, "scored"),
                unit="reqps",
            )
        )
        .with_panel(
            series(
                "Open alerts by severity",
                "Open alert episodes in the API's database.",
                prom(f"sum by (severity) ({OPEN_ALERTS})", "{{severity}}"),
            )
        )
        .with_panel(
            series(
                "Open alerts by kind",
                "By the detector that raised them (fixed-baseline: before a device has learned "
                "parameters; state: a device-wide move).",
                prom(f"sum by (kind) ({OPEN_ALERTS})", "{{kind}}"),
            )
        )
        .with_panel(
            series(
                "Anomaly rate over time",
                "Alerts opened per reading scored.",
                prom(f"{OPENED} / {SCORED}", "opened per reading"),
                unit="percentunit",
            )
        )
        .with_panel(
            series(
                "Alert events per minute",
                "Opened, resolved and withdrawn episodes, as the scorer emits them.",
                prom(
                    f"60 * sum by (event) (rate(fleetwatch_score_alert_events_total[{RATE}]))",
                    "{{event}}",
                ),
            )
        )
        .with_row(dashboard.Row("Devices"))
        .with_panel(top)
        .with_panel(worst)
        .with_row(dashboard.Row("Commands and webhooks"))
        .with_panel(
            series(
                "Commands by status",
                "Commands in the API's database: pending, sent, acked, failed, timed_out.",
                prom("max by (status) (fleetwatch_api_commands_by_status)", "{{status}}"),
            )
        )
        .with_panel(
            series(
                "Webhook backlog",
                "Deliveries waiting in the outbox, and how long the oldest has waited.",
                prom('max(fleetwatch_api_webhook_outbox{status="pending"})', "pending"),
                prom("max(fleetwatch_api_webhook_oldest_pending_seconds)", "oldest (s)"),
            )
        )
    )
