"""The dashboards as code: the committed JSON is what the builders make, every panel, target,
annotation and variable reads its datasource through a datasource variable (never a uid) that
defaults to the one fleetwatch provisions, every panel has a query, ids and refIds are unique,
and no PromQL groups by a device."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetwatch.observability import dashboards
from fleetwatch.observability.dashboards import _panels
from fleetwatch.observability.panels import DATABASE_UID, PROMETHEUS_UID, SOURCES
from fleetwatch.observability.queries import queries

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMMITTED = DEPLOY / "grafana" / "dashboards"


def test_the_committed_json_is_what_the_code_builds() -> None:
    assert dashboards.stale(COMMITTED) == [], "run `fleetwatch grafana build` and commit"


@pytest.mark.parametrize("name", sorted(dashboards.BUILDERS))
def test_every_panel_queries_a_provisioned_datasource(name: str) -> None:
    built = dashboards.model(name)
    assert built["uid"] == f"fleetwatch-{name}"
    panels = list(_panels(built["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    titles = [p["title"] for p in panels]
    assert len(titles) == len(set(titles)), "a title names one panel"
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel.get("targets"), f'panel "{panel["title"]}" has no query'
        assert panel["datasource"] in [source.ref.to_json() for source in SOURCES]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs == [chr(ord("A") + i) for i in range(len(refs))]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
        assert panel["gridPos"]["w"] <= 24


def _references(node: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Every ``datasource`` of the JSON model, wherever it is, with its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield f"{where}.{key}", value
            yield from _references(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _references(value, f"{where}[{i}]")


@pytest.mark.parametrize("name", sorted(dashboards.BUILDERS))
def test_every_datasource_reference_is_a_variable_of_the_dashboard_never_a_uid(
    name: str,
) -> None:
    built = dashboards.model(name)
    variables = {v["name"]: v for v in built["templating"]["list"]}
    references = list(_references(built))
    assert references
    used = set()
    for where, reference in references:
        assert isinstance(reference, dict), f"{where}: {reference!r}, not {{type, uid}}"
        match = re.fullmatch(r"\$\{(\w+)\}", reference.get("uid", ""))
        assert match, f"{where}: a literal uid {reference.get('uid')!r}"
        variable = variables.get(match.group(1))
        assert variable is not None, f"{where}: no variable ${match.group(1)}"
        assert variable["type"] == "datasource"
        assert variable["query"] == reference["type"], f"{where}: another type than its variable"
        used.add(variable["name"])
    panels = [p for p in _panels(built["panels"]) if p["type"] != "row"]
    targets = [t for p in panels for t in p["targets"]]
    annotations = built.get("annotations", {}).get("list", [])
    assert all("datasource" in item for item in panels + targets + annotations)
    declared = {v["name"] for v in variables.values() if v["type"] == "datasource"}
    assert declared == used, "a datasource variable no query reads"


@pytest.mark.parametrize("name", sorted(dashboards.BUILDERS))
def test_the_datasource_variables_default_to_what_compose_provisions(name: str) -> None:
    provisioned = {}
    for path in (DEPLOY / "grafana" / "provisioning" / "datasources").glob("*.yaml"):
        for source in yaml.safe_load(path.read_text())["datasources"]:
            provisioned[source["uid"]] = source
    listed = dashboards.model(name)["templating"]["list"]
    kinds = [v["type"] for v in listed]
    first_other = kinds.index("query") if "query" in kinds else len(kinds)
    assert set(kinds[:first_other]) == {"datasource"}, "a query variable may read one of them"
    by_name = {source.variable: source for source in SOURCES}
    for variable in listed[:first_other]:
        source = by_name[variable["name"]]
        default = provisioned[variable["current"]["value"]]
        assert (variable["query"], variable["label"]) == (source.plugin, source.label)
        assert (default["uid"], default["type"]) == (source.uid, source.plugin)
        assert variable["current"]["text"] == default["name"]
        assert not variable["multi"]
        assert not variable["includeAll"]


def test_the_fleets_device_links_carry_its_database_to_the_device_dashboard() -> None:
    fleet = dashboards.render(dashboards.model("fleet"))
    links = re.findall(r'"url": "(/d/fleetwatch-device[^"]*)"', fleet)
    assert links
    assert all("${database:queryparam}" in link for link in links)


def test_the_prometheus_datasource_is_the_one_compose_provisions() -> None:
    source = DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
    (provisioned,) = yaml.safe_load(source.read_text())["datasources"]
    assert provisioned["uid"] == PROMETHEUS_UID


def test_no_query_groups_or_filters_by_a_device() -> None:
    for built in dashboards.models().values():
        for query in queries(built):
            if query.language == "promql":
                # a label named device or device_id, in a selector or a grouping
                assert not re.search(r"[{(,]\s*device(_id)?\s*[=!,)]", query.text), query


def test_every_query_is_found_panels_annotations_and_variables() -> None:
    found = [q for built in dashboards.models().values() for q in queries(built)]
    device = [q.where for q in found if q.dashboard == "fleetwatch-device"]
    assert 'annotation "Alerts"' in device
    assert "variable $device" in device
    assert {q.language for q in found} == {"promql", "sql"}
    assert all(q.text.strip() for q in found)


def test_the_grafana_reader_role_may_read_every_table_the_sql_names() -> None:
    grants = (DEPLOY / "postgres" / "grafana-reader.sql").read_text()
    match = re.search(r"GRANT SELECT ON ([\w,\s]+?)\s+TO", grants)
    assert match is not None
    granted = set(match.group(1).replace(",", " ").split())
    named = {
        table
        for built in dashboards.models().values()
        for query in queries(built)
        if query.language == "sql"
        for table in re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", query.text)
        if table != "LATERAL"
    }
    assert named <= granted, named - granted
    assert {"api_keys", "webhooks", "webhook_deliveries"}.isdisjoint(granted)


def test_compose_provisions_the_database_datasource_the_sql_panels_use() -> None:
    source = DEPLOY / "grafana" / "provisioning" / "datasources" / "fleetwatch-db.yaml"
    (provisioned,) = yaml.safe_load(source.read_text())["datasources"]
    assert provisioned["uid"] == DATABASE_UID
    assert provisioned["type"] == "grafana-postgresql-datasource"
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert provisioned["url"].split(":")[0] in compose["services"]
    assert "POSTGRES_PASSWORD" in compose["services"]["grafana"]["environment"]
