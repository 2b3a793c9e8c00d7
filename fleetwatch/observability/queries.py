"""Every query a dashboard's JSON model makes: each panel target (PromQL or SQL), each SQL
annotation and variable. What the dashboards' test runs against the real Prometheus and
database, so that a query with no answer — a metric no stage exports, a column no table has —
is found before an operator finds an empty panel."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from fleetwatch.observability.dashboards import _panels

Language = Literal["promql", "sql"]
LANGUAGES: dict[str, Language] = {
    "prometheus": "promql",
    "grafana-postgresql-datasource": "sql",
}


@dataclass(frozen=True)
class Query:
    dashboard: str
    """The dashboard's uid."""
    where: str
    """``panel "Title" A``, ``annotation "Alerts"``, ``variable $device``."""
    language: Language
    text: str
    instant: bool = False


def _language(datasource: dict[str, Any] | None, where: str) -> Language:
    kind = (datasource or {}).get("type", "")
    if kind not in LANGUAGES:
        raise ValueError(f"{where}: a datasource of type {kind!r}, which fleetwatch does not use")
    return LANGUAGES[kind]


def queries(built: dict[str, Any]) -> Iterator[Query]:
    uid = str(built["uid"])
    for panel in _panels(built.get("panels", [])):
        for target in panel.get("targets", []):
            where = f'panel "{panel.get("title")}" {target.get("refId")}'
            language = _language(target.get("datasource") or panel.get("datasource"), where)
            text = target["expr"] if language == "promql" else target["rawSql"]
            yield Query(uid, where, language, text, bool(target.get("instant")))
    for annotation in built.get("annotations", {}).get("list", []):
        target = annotation.get("target") or {}
        if "rawSql" in target:
            where = f'annotation "{annotation.get("name")}"'
            yield Query(
                uid, where, _language(annotation.get("datasource"), where), target["rawSql"]
            )
    for variable in built.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            where = f"variable ${variable.get('name')}"
            yield Query(uid, where, _language(variable.get("datasource"), where), variable["query"])
