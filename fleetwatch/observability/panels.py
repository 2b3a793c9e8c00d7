"""The pieces every dashboard is made of: the two datasources, queries, and panels with the
layout and units they share. Panels take their queries' ``refId`` (A, B, …) from their order."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common, dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as model

from fleetwatch.observability.sql import Sql, SqlFormat

PROMETHEUS_UID = "prometheus"
DATABASE_UID = "fleetwatch-db"
PROMETHEUS = model.DataSourceRef(type_val="prometheus", uid=PROMETHEUS_UID)
"""Every stage's metrics (deploy/grafana/provisioning/datasources/prometheus.yaml)."""
DATABASE = model.DataSourceRef(type_val="grafana-postgresql-datasource", uid=DATABASE_UID)
"""The API's PostgreSQL database, read-only (see README "Dashboards")."""

RATE = "$__rate_interval"
"""Grafana's rate window: at least four scrape intervals of the datasource."""


Target = prometheus.Dataquery | Sql


def prom(expr: str, legend: str | None = None, instant: bool = False) -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(expr).datasource(PROMETHEUS)
    if legend is not None:
        query = query.legend_format(legend)
    return query.instant() if instant else query.range()


def sql(raw_sql: str, fmt: SqlFormat = "table") -> Sql:
    return Sql(" ".join(raw_sql.split()), DATABASE, fmt)


def _named(targets: tuple[Target, ...]) -> list[Target]:
    """The targets with their ``refId``: A, B, … in order."""
    return [target.ref_id(chr(ord("A") + i)) for i, target in enumerate(targets)]


def _datasource(targets: tuple[Target, ...]) -> model.DataSourceRef:
    return DATABASE if any(isinstance(t, Sql) for t in targets) else PROMETHEUS


def series(
    title: str,
    description: str,
    *targets: Target,
    unit: str = "short",
    span: int = 12,
    height: int = 8,
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(_datasource(targets))
        .unit(unit)
        .span(span)
        .height(height)
        .fill_opacity(10)
        .line_width(1)
        .show_points(common_model.VisibilityMode.NEVER)
        .legend(
            common.VizLegendOptions()
            .show_legend(True)
            .display_mode(common_model.LegendDisplayMode.LIST)
            .placement(common_model.LegendPlacement.BOTTOM)
        )
    )
    for target in _named(targets):
        panel = panel.with_target(target)
    return panel


def single(
    title: str,
    description: str,
    target: Target,
    unit: str = "short",
    span: int = 4,
    height: int = 4,
    thresholds: list[tuple[float | None, str]] | None = None,
) -> stat.Panel:
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(_datasource((target,)))
        .unit(unit)
        .span(span)
        .height(height)
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .graph_mode(common_model.BigValueGraphMode.AREA)
        .color_mode(common_model.BigValueColorMode.VALUE)
    )
    # the first step is the base (value None); each further one from its value upwards
    steps = thresholds or [(None, "green")]
    panel = panel.thresholds(
        dashboard.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps([model.Threshold(value=value, color=color) for value, color in steps])
    )
    for named in _named((target,)):
        panel = panel.with_target(named)
    return panel


def grid(
    title: str,
    description: str,
    target: Target,
    span: int = 12,
    height: int = 8,
) -> table.Panel:
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(_datasource((target,)))
        .span(span)
        .height(height)
    )
    for named in _named((target,)):
        panel = panel.with_target(named)
    return panel
