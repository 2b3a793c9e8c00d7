"""A rule's devices: its selector resolved against the registry, published again (same version)
when a registry change moves them; rule alerts in the store and the API; the migration."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from fleetwatch.contracts.alerts import RULE_KIND, Alert
from fleetwatch.contracts.rules import RuleRecord, decode
from fleetwatch.contracts.wire import MAX_RECORD_BYTES
from fleetwatch.serving.tables import Base, DeviceRow
from tests.unit.api_support import Api, make_alert, memory_store, running_api
from tests.unit.test_api import feed

PUMPS = {"id": "pumps", "name": "Pumps", "when": "vibration > 7", "select": {"kinds": ["pump"]}}
NORTH = {"id": "north", "name": "North", "when": "temperature > 80", "select": {"tags": ["north"]}}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from running_api(tmp_path)


def register(api: Api, device_id: str, **fields: Any) -> None:
    response = api.post("/devices", json={"device_id": device_id, **fields})
    assert response.status_code == 201, response.text


def patch(api: Api, device_id: str, **fields: Any) -> Any:
    return api.client.patch(f"/devices/{device_id}", json=fields, headers=api.as_("admin"))


def latest(api: Api, rule_id: str) -> RuleRecord:
    """The rule's newest record on the (fake) topic."""
    value = next(v for r, v in reversed(api.publisher.rules) if r == rule_id)
    assert value is not None
    return decode(value)


def test_a_selector_is_resolved_against_the_registry(api: Api) -> None:
    register(api, "p1", kind="pump")
    register(api, "p2", kind="pump", tags=["south"])
    register(api, "f1", kind="fan", tags=["north"])
    register(api, "f2", kind="fan")
    rule = {
        "id": "mixed",
        "name": "Mixed",
        "when": "vibration > 7",
        "select": {"devices": ["zz-unregistered", "f2"], "kinds": ["pump"], "tags": ["north"]},
    }
    body = api.post("/rules", json=rule).json()
    assert body["devices"] == ["f1", "f2", "p1", "p2", "zz-unregistered"]
    assert latest(api, "mixed").devices == body["devices"]
    everyone = api.post("/rules", json={"id": "all", "name": "All", "when": "true"}).json()
    assert everyone["devices"] is None
    nobody = api.post("/rules", json=PUMPS | {"id": "valves", "select": {"kinds": ["valve"]}})
    assert nobody.json()["devices"] == []
    assert latest(api, "valves").devices == []


def test_registering_a_device_of_a_selected_kind_publishes_the_rule_again(api: Api) -> None:
    register(api, "p1", kind="pump")
    api.post("/rules", json=PUMPS)
    api.post("/rules", json=NORTH)
    published = len(api.publisher.rules)
    register(api, "p2", kind="pump")
    assert len(api.publisher.rules) == published + 1
    again = latest(api, "pumps")
    assert (again.version, again.devices) == (1, ["p1", "p2"])
    assert api.get("/rules/pumps").json()["devices"] == ["p1", "p2"]
    register(api, "f1", kind="fan")  # names no rule's kind or tag: nothing published
    assert len(api.publisher.rules) == published + 1


def test_tags_kinds_and_deletion_move_a_device_in_and_out(api: Api) -> None:
    register(api, "d1", kind="fan")
    api.post("/rules", json=NORTH)
    api.post("/rules", json=PUMPS)
    assert patch(api, "d1", tags=["north", "roof"]).status_code == 200
    assert latest(api, "north").devices == ["d1"]
    assert patch(api, "d1", kind="pump").status_code == 200
    assert latest(api, "pumps").devices == ["d1"]
    before = len(api.publisher.rules)
    assert patch(api, "d1", name="renamed", tags=["roof", "north"]).status_code == 200
    assert len(api.publisher.rules) == before  # nothing a selector names moved
    assert patch(api, "d1", tags=["roof"]).status_code == 200
    assert latest(api, "north").devices == []
    assert api.client.delete("/devices/d1", headers=api.as_("admin")).status_code == 204
    assert (latest(api, "pumps").version, latest(api, "pumps").devices) == (1, [])
    assert api.get("/rules/pumps").json()["devices"] == []


def test_a_rule_that_selects_by_device_id_only_is_not_published_again(api: Api) -> None:
    api.post("/rules", json=PUMPS | {"select": {"devices": ["p1"]}})
    register(api, "p1", kind="pump", tags=["north"])
    assert len(api.publisher.rules) == 1
    assert latest(api, "pumps").devices == ["p1"]


def test_a_deleted_rule_is_not_published_again(api: Api) -> None:
    api.post("/rules", json=PUMPS)
    api.client.delete("/rules/pumps", headers=api.as_("admin"))
    register(api, "p1", kind="pump")
    assert api.publisher.rules[-1] == ("pumps", None)


def test_a_registry_change_whose_rules_kafka_does_not_take_is_not_made(api: Api) -> None:
    register(api, "p1", kind="fan")
    api.post("/rules", json=PUMPS)
    api.publisher.failing = True
    response = patch(api, "p1", kind="pump")
    assert response.status_code == 503
    assert "were not published" in response.json()["detail"]
    assert api.get("/devices/p1").json()["kind"] == "fan"
    assert api.get("/rules/pumps").json()["devices"] == []
    assert api.post("/devices", json={"device_id": "p2", "kind": "pump"}).status_code == 503
    assert api.get("/devices/p2").status_code == 404
    # a change no rule's selector names needs no Kafka
    assert patch(api, "p1", name="still a fan").status_code == 200
    api.publisher.failing = False
    assert patch(api, "p1", kind="pump").status_code == 200
    assert latest(api, "pumps").devices == ["p1"]


def test_a_selection_too_large_for_a_record_is_refused(api: Api) -> None:
    pad = "x" * 100
    count = MAX_RECORD_BYTES // 100
    with api.store.session() as session, session.begin():
        session.add_all(
            DeviceRow(
                device_id=f"{pad}-{i:06d}",
                kind="huge",
                attributes={},
                registered=True,
                created_ms=1,
                updated_ms=1,
            )
            for i in range(count)
        )
    response = api.post("/rules", json=PUMPS | {"select": {"kinds": ["huge"]}})
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "select"]
    assert f"selects {count} devices" in detail["msg"]
    assert api.get("/rules/pumps").status_code == 404
    assert api.publisher.rules == []


def rule_alert(device_id: str, rule_id: str, version: int, revision: int = 0) -> Alert:
    fields = make_alert(device_id, 1 + revision, 1_000 + revision, start_ms=1_000).model_dump()
    fields |= {
        "detector": RULE_KIND,
        "rule_id": rule_id,
        "rule_version": version,
        "revision": revision,
        "status": "open" if revision == 0 else "update",
    }
    return Alert.model_validate(fields)


def test_rule_alerts_are_stored_with_their_rule_and_found_by_it(api: Api) -> None:
    feed(api.store, alerts=[rule_alert("d1", "pumps", 1), make_alert("d1", 5, 5_000)])
    feed(api.store, alerts=[rule_alert("d1", "pumps", 2, revision=1), rule_alert("d2", "hot", 1)])
    body = api.get("/alerts", params={"rule_id": "pumps"}).json()
    assert body["count"] == 1
    [alert] = body["data"]
    assert (alert["detector"], alert["rule_id"], alert["rule_version"]) == ("rule", "pumps", 2)
    assert alert["revision"] == 1
    by_device = api.get("/alerts", params={"device": "d1"}).json()["data"]
    assert sorted((a["rule_id"] or "-") for a in by_device) == ["-", "pumps"]
    assert api.get(f"/alerts/{alert['alert_id']}").json()["rule_version"] == 2
    assert api.get("/alerts", params={"rule_id": "Bad Id"}).status_code == 422


def test_the_migrations_make_the_tables_the_code_maps() -> None:
    store = memory_store()
    with store.engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
