"""The pieces every dashboard is made of: the two datasources (as dashboard variables), queries,
and panels with the layout and units they share. Panels take their queries' ``refId`` (A, B, …)
from their order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Self, TypeVar

from grafana_foundation_sdk.builders import common, dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as model

from fleetwatch.observability.sql import Sql, SqlFormat


@dataclass(frozen=True)
class Source:
    """A datasource the dashboards read, chosen per dashboard by a ``datasource`` variable: every
    query names ``${variable}``, never a uid, so a Grafana whose datasources have other uids
    works once a user picks them. The variable defaults to the datasource compose provisions
    (``deploy/grafana/provisioning/datasources/``), which ``fleetwatch grafana push`` creates."""

    variable: str
    label: str
    plugin: str
    """Grafana's plugin id: the variable lists the datasources of this type."""
    uid: str
    name: str

    @property
    def ref(self) -> model.DataSourceRef:
        return model.DataSourceRef(type_val=self.plugin, uid="${" + self.variable + "}")

    def variable_builder(self) -> dashboard.DatasourceVariable:
        return (
            dashboard.DatasourceVariable(self.variable)
            .label(self.label)
            .type(self.plugin)
            .current(model.VariableOption(text=self.name, value=self.uid))
            .multi(False)
            .include_all(False)
            .allow_custom_value(False)
        )


PROMETHEUS_SOURCE = Source("prometheus", "Prometheus", "prometheus", "prometheus", "Prometheus")
"""Every stage's metrics (deploy/grafana/provisioning/datasources/prometheus.yaml)."""
DATABASE_SOURCE = Source(
    "database",
    "Database",
    "grafana-postgresql-datasource",
    "fleetwatch-db",
    "fleetwatch API database",
)
"""The API's PostgreSQL database, read-only (see README "Dashboards")."""
SOURCES = (PROMETHEUS_SOURCE, DATABASE_SOURCE)

PROMETHEUS_UID = PROMETHEUS_SOURCE.uid
DATABASE_UID = DATABASE_SOURCE.uid
PROMETHEUS = PROMETHEUS_SOURCE.ref
DATABASE = DATABASE_SOURCE.ref


def board(title: str, uid: str, description: str, *sources: Source) -> dashboard.Dashboard:
    """A fleetwatch dashboard with a variable for each datasource its queries read, ahead of
    any other variable (a query variable may read one)."""
    built = (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["fleetwatch"])
        .refresh("30s")
        .time("now-1h", "now")
    )
    for source in sources:
        built = built.with_variable(source.variable_builder())
    return built


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


class _Panel(Protocol):
    """What every panel builder of the SDK (time series, stat, table) has."""

    def title(self, title: str) -> Self: ...
    def description(self, description: str) -> Self: ...
    def datasource(self, datasource: model.DataSourceRef) -> Self: ...
    def span(self, w: int) -> Self: ...
    def height(self, h: int) -> Self: ...
    def with_target(self, target: Target) -> Self: ...


P = TypeVar("P", bound=_Panel)


def _framed(
    panel: P, title: str, description: str, targets: tuple[Target, ...], span: int, height: int
) -> P:
    """``panel`` with what every panel here has: its title and description, the datasource of
    its targets, its size, and the targets themselves, named A, B, … in order."""
    panel = (
        panel.title(title)
        .description(description)
        .datasource(_datasource(targets))
        .span(span)
        .height(height)
    )
    for target in _named(targets):
        panel = panel.with_target(target)
    return panel


def series(
    title: str,
    description: str,
    *targets: Target,
    unit: str = "short",
    span: int = 12,
    height: int = 8,
) -> timeseries.Panel:
    return (
        _framed(timeseries.Panel(), title, description, targets, span, height)
        .unit(unit)
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
        _framed(stat.Panel(), title, description, (target,), span, height)
        .unit(unit)
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
    return panel


def grid(
    title: str,
    description: str,
    target: Target,
    span: int = 12,
    height: int = 8,
) -> table.Panel:
    return _framed(table.Panel(), title, description, (target,), span, height)
