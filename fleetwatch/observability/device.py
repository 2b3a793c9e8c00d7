"""The Device dashboard: one device (a variable), its recent readings with the band its
detector expected when it alerted, its alerts as annotations and as a table, its state, model
and sessions. Every query is SQL on the API's database (PostgreSQL): per-device data is never a
Prometheus label."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common, dashboard
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as model

from fleetwatch.observability.panels import (
    DATABASE,
    DATABASE_SOURCE,
    board,
    grid,
    series,
    single,
    sql,
)
from fleetwatch.observability.sql import SqlAnnotation

UID = "fleetwatch-device"

IN_RANGE = "BETWEEN $__unixEpochFrom()::bigint * 1000 AND $__unixEpochTo()::bigint * 1000"
"""An epoch-milliseconds column within the dashboard's time range."""

DEVICES = "SELECT device_id FROM devices ORDER BY device_id"

READINGS = f"""
SELECT to_timestamp(r.event_ms / 1000.0) AS time, m.key AS metric, m.value::float8 AS value
FROM readings r CROSS JOIN LATERAL jsonb_each_text(r.metrics::jsonb) AS m
WHERE r.device_id = '$device' AND r.event_ms {IN_RANGE}
ORDER BY 1
"""

# The scorer publishes no band per reading; an alert records the detector's expected value and
# band (expected ± band) where it opened or was last updated. Each episode draws it from its
# start to its end (now, while open), then a NULL breaks the line before the next episode.
BAND = """
SELECT to_timestamp(p.ms / 1000.0) AS time, a.metric || ' ' || p.edge AS metric, p.value
FROM alerts a
CROSS JOIN LATERAL (VALUES
    (a.start_ms, 'low', a.expected - a.band),
    (a.start_ms, 'high', a.expected + a.band),
    (coalesce(a.end_ms, a.event_ms), 'low', a.expected - a.band),
    (coalesce(a.end_ms, a.event_ms), 'high', a.expected + a.band),
    (coalesce(a.end_ms, a.event_ms) + 1, 'low', NULL),
    (coalesce(a.end_ms, a.event_ms) + 1, 'high', NULL)
) AS p(ms, edge, value)
WHERE a.device_id = '$device' AND a.start_ms <= $__unixEpochTo()::bigint * 1000
  AND coalesce(a.end_ms, a.event_ms) >= $__unixEpochFrom()::bigint * 1000
ORDER BY 1
"""

ANNOTATIONS = f"""
SELECT to_timestamp(a.start_ms / 1000.0) AS time,
       to_timestamp(coalesce(a.end_ms, a.event_ms) / 1000.0) AS timeend,
       a.severity || ' · ' || a.metric || ': ' || a.reason AS text,
       a.detector || ',' || a.severity || ',' || a.state AS tags
FROM alerts a
WHERE a.device_id = '$device' AND a.start_ms {IN_RANGE}
ORDER BY a.start_ms
"""

ALERTS = """
SELECT to_timestamp(a.start_ms / 1000.0) AS started,
       to_timestamp(a.end_ms / 1000.0) AS ended,
       a.state, a.severity, a.metric, a.detector,
       a.value, a.expected, a.band, a.score, a.reason, a.acknowledged_by
FROM alerts a
WHERE a.device_id = '$device' AND a.start_ms <= $__unixEpochTo()::bigint * 1000
  AND coalesce(a.end_ms, a.event_ms) >= $__unixEpochFrom()::bigint * 1000
ORDER BY a.start_ms DESC
LIMIT 200
"""

STATUS = """
SELECT coalesce(s.status, 'unknown') AS status
FROM devices d LEFT JOIN device_state s ON s.device_id = d.device_id
WHERE d.device_id = '$device'
"""

LAST_SEEN = """
SELECT to_timestamp(s.last_seen_ms / 1000.0) AS time, s.last_seen_ms AS last_seen
FROM device_state s WHERE s.device_id = '$device'
"""

OPEN_ALERTS = "SELECT count(*) AS open FROM alerts WHERE device_id = '$device' AND state = 'open'"

MODEL = """
SELECT m.kind, m.version, to_timestamp(m.published_ms / 1000.0) AS published,
       to_timestamp(m.trained_to_ms / 1000.0) AS learned_until
FROM devices d LEFT JOIN device_models m ON m.device_id = d.device_id
WHERE d.device_id = '$device'
"""

SESSIONS = """
SELECT to_timestamp(s.start_ms / 1000.0) AS started,
       to_timestamp(s.end_ms / 1000.0) AS last_reading,
       s.readings, s.end_reason
FROM device_sessions s
WHERE s.device_id = '$device'
ORDER BY s.start_ms DESC
LIMIT 20
"""


def build() -> dashboard.Dashboard:
    readings = series(
        "Readings and expected band",
        "Recent readings of every metric (the newest api.telemetry_per_device per device), "
        "and where the device alerted, the band its detector expected (expected ± band, "
        "dashed). Alerts are the red regions.",
        sql(READINGS, "time_series"),
        sql(BAND, "time_series"),
        span=24,
        height=10,
    ).override_by_regexp(
        "/ (low|high)$/",
        [
            model.DynamicConfigValue(
                id_val="custom.lineStyle", value={"fill": "dash", "dash": [6, 4]}
            ),
            model.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
            model.DynamicConfigValue(id_val="custom.spanNulls", value=False),
        ],
    )
    return (
        board(
            "fleetwatch · Device",
            UID,
            "One device: readings, expected band, alerts, state, model, sessions.",
            DATABASE_SOURCE,
        )
        .with_variable(
            dashboard.QueryVariable("device")
            .label("Device")
            .datasource(DATABASE)
            .query(DEVICES)
            .refresh(model.VariableRefresh.ON_DASHBOARD_LOAD)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
        )
        .annotation(
            dashboard.AnnotationQuery()
            .name("Alerts")
            .datasource(DATABASE)
            .enable(True)
            .icon_color("red")
            .target(SqlAnnotation(" ".join(ANNOTATIONS.split())))
        )
        .with_panel(
            single("Status", "The scorer's latest state of the device.", sql(STATUS), span=6)
            .text_mode(common_model.BigValueTextMode.VALUE)
            .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).fields("/^status$/"))
        )
        .with_panel(
            single(
                "Last seen",
                "Event time of its latest reading.",
                sql(LAST_SEEN),
                unit="dateTimeFromNow",
                span=6,
            ).reduce_options(
                common.ReduceDataOptions().calcs(["lastNotNull"]).fields("/^last_seen$/")
            )
        )
        .with_panel(
            single(
                "Open alerts",
                "Open alert episodes of the device.",
                sql(OPEN_ALERTS),
                span=6,
                thresholds=[(None, "green"), (1, "red")],
            )
        )
        .with_panel(
            single(
                "Model version",
                "Version of its learned parameters on model.params (empty: still learning).",
                sql(MODEL),
                span=6,
            ).reduce_options(
                common.ReduceDataOptions().calcs(["lastNotNull"]).fields("/^version$/")
            )
        )
        .with_panel(readings)
        .with_panel(
            grid("Alerts", "Alert episodes in the time range, newest first.", sql(ALERTS), span=24)
        )
        .with_panel(
            grid(
                "Model",
                "Its learned parameters: kind, version, when.",
                sql(MODEL),
                span=12,
                height=5,
            )
        )
        .with_panel(
            grid(
                "Sessions",
                "Activity sessions (a gap of score.session_gap_s or a reboot ends one).",
                sql(SESSIONS),
                span=12,
                height=5,
            )
        )
    )
