"""The dashboards as code: the committed JSON is what the builders make, every panel names a
datasource fleetwatch provisions and has a query, ids and refIds are unique, and no PromQL
groups by a device."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fleetwatch.observability import dashboards
from fleetwatch.observability.dashboards import _panels
from fleetwatch.observability.panels import DATABASE_UID, PROMETHEUS_UID
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
        assert panel["datasource"]["uid"] in (PROMETHEUS_UID, DATABASE_UID)
        refs = [t["refId"] for t in panel["targets"]]
        assert refs == [chr(ord("A") + i) for i in range(len(refs))]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
        assert panel["gridPos"]["w"] <= 24


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
