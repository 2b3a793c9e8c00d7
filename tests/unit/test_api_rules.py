"""Operators' rules through the API: every route and scope, versions, Spark's refusals as 422,
and a write Kafka or the checker cannot take as a 503 that changed nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.contracts.rules import decode
from fleetwatch.serving.rules import publish as publishing
from tests.unit.api_support import Api, running_api

HOT = {"id": "hot", "name": "Too hot", "severity": "critical", "when": "temperature > 80"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from running_api(tmp_path)


def put(api: Api, rule: dict[str, Any], scope: str = "admin", rule_id: str | None = None) -> Any:
    path = f"/rules/{rule_id or rule['id']}"
    return api.client.put(path, json=rule, headers=api.as_(scope))


def delete(api: Api, rule_id: str, scope: str = "admin") -> Any:
    return api.client.delete(f"/rules/{rule_id}", headers=api.as_(scope))


def test_a_created_rule_is_version_1_on_the_topic_and_read_back(api: Api) -> None:
    response = api.post("/rules", json=HOT)
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["id"], body["version"], body["devices"], body["updated_by"]) == (
        "hot",
        1,
        None,
        "admin-key",
    )
    [(rule_id, value)] = api.publisher.rules
    assert rule_id == "hot"
    assert value is not None
    published = decode(value)
    assert (published.version, published.when, published.severity) == (1, HOT["when"], "critical")
    assert published.updated_ms == body["updated_ms"]
    assert api.get("/rules/hot").json() == body
    assert api.get("/rules").json()["data"] == [body]
    assert [spec.id for spec in api.checker.checked] == ["hot"]


def test_creating_a_rule_that_exists_is_a_409_and_publishes_nothing(api: Api) -> None:
    assert api.post("/rules", json=HOT).status_code == 201
    response = api.post("/rules", json=HOT | {"when": "temperature > 90"})
    assert response.status_code == 409
    assert "exists (version 1)" in response.json()["detail"]
    assert len(api.publisher.rules) == 1
    assert api.get("/rules/hot").json()["when"] == HOT["when"]


def test_every_change_is_a_new_version_and_the_same_rule_again_is_none(api: Api) -> None:
    created = put(api, HOT)
    assert (created.status_code, created.json()["version"]) == (201, 1)
    changed = put(api, HOT | {"when": "temperature > 85"})
    assert (changed.status_code, changed.json()["version"]) == (200, 2)
    again = put(api, HOT | {"when": "temperature > 85"})
    assert (again.status_code, again.json()["version"]) == (200, 2)
    assert [decode(v or b"").version for _, v in api.publisher.rules] == [1, 2]
    assert decode(api.publisher.rules[-1][1] or b"").when == "temperature > 85"
    versions = api.get("/rules/hot/versions").json()
    assert versions["count"] == 2
    assert [(v["version"], v["rule"]["when"]) for v in versions["data"]] == [
        (2, "temperature > 85"),
        (1, "temperature > 80"),
    ]


def test_deleting_is_a_version_and_a_tombstone_and_the_versions_count_on(api: Api) -> None:
    put(api, HOT)
    put(api, HOT | {"severity": "warning"})
    assert delete(api, "hot").status_code == 204
    assert api.publisher.rules[-1] == ("hot", None)
    gone = api.get("/rules/hot")
    assert gone.status_code == 404
    assert "deleted (version 3)" in gone.json()["detail"]
    assert api.get("/rules").json()["count"] == 0
    versions = api.get("/rules/hot/versions").json()["data"]
    assert [(v["version"], v["deleted"], v["rule"] is None) for v in versions] == [
        (3, True, True),
        (2, False, False),
        (1, False, False),
    ]
    assert delete(api, "hot").status_code == 404
    again = api.post("/rules", json=HOT)
    assert (again.status_code, again.json()["version"]) == (201, 4)
    assert decode(api.publisher.rules[-1][1] or b"").version == 4


def test_unknown_rules_are_404s(api: Api) -> None:
    assert api.get("/rules/nope").status_code == 404
    assert api.get("/rules/nope/versions").status_code == 404
    assert delete(api, "nope").status_code == 404
    assert api.publisher.rules == []


def test_reading_needs_a_key_and_writing_needs_the_admin_scope(api: Api) -> None:
    assert api.client.get("/rules").status_code == 401
    assert api.client.post("/rules", json=HOT).status_code == 401
    assert api.get("/rules", scope="read").status_code == 200
    for scope in ("read", "operate"):
        assert api.post("/rules", json=HOT, scope=scope).status_code == 403
        assert put(api, HOT, scope=scope).status_code == 403
    put(api, HOT)
    for scope in ("read", "operate"):
        assert delete(api, "hot", scope=scope).status_code == 403
        assert api.get("/rules/hot", scope=scope).status_code == 200
        assert api.get("/rules/hot/versions", scope=scope).status_code == 200
    assert len(api.publisher.rules) == 1


def test_a_condition_spark_refuses_is_a_422_naming_the_field_and_nothing_is_kept(
    api: Api,
) -> None:
    message = "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column `temprature` cannot be resolved."
    api.checker.refused["temprature > 80"] = ("when", message)
    response = api.post("/rules", json=HOT | {"when": "temprature > 80"})
    assert response.status_code == 422
    assert response.json()["detail"] == [
        {"loc": ["body", "when"], "msg": message, "type": "rule_invalid"}
    ]
    assert put(api, HOT | {"when": "temprature > 80"}).status_code == 422
    assert api.get("/rules/hot").status_code == 404
    assert api.publisher.rules == []


def test_a_rule_the_contract_refuses_never_reaches_the_checker(api: Api) -> None:
    assert api.post("/rules", json=HOT | {"id": "Not An Id"}).status_code == 422
    windowed = HOT | {"window": {"size": "5 minutes", "slide": "2 minutes"}}
    response = api.post("/rules", json=windowed)
    assert response.status_code == 422
    assert "must divide" in response.text
    assert api.post("/rules", json=HOT | {"unknown": 1}).status_code == 422
    assert api.checker.checked == []


def test_a_put_whose_body_names_another_rule_is_a_422(api: Api) -> None:
    response = put(api, HOT, rule_id="cold")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "id"]
    assert api.publisher.rules == []


def test_a_rule_that_cannot_be_checked_is_a_503_and_not_kept(api: Api) -> None:
    api.checker.down = "the rule checker exited (code 1) before its first answer: no JVM"
    response = put(api, HOT)
    assert response.status_code == 503
    assert "cannot be checked now" in response.json()["detail"]
    assert "no JVM" in response.json()["detail"]
    assert api.get("/rules/hot").status_code == 404
    assert api.publisher.rules == []


def test_a_create_kafka_does_not_take_is_rolled_back(api: Api) -> None:
    api.publisher.failing = True
    response = api.post("/rules", json=HOT)
    assert response.status_code == 503
    assert "broker away" in response.json()["detail"]
    assert api.get("/rules/hot").status_code == 404
    assert api.get("/rules/hot/versions").status_code == 404
    api.publisher.failing = False
    assert api.post("/rules", json=HOT).json()["version"] == 1


def test_a_change_or_deletion_kafka_does_not_take_leaves_the_rule_as_it_was(api: Api) -> None:
    put(api, HOT)
    api.publisher.failing = True
    assert put(api, HOT | {"when": "temperature > 99"}).status_code == 503
    response = delete(api, "hot")
    assert response.status_code == 503
    assert "was not deleted" in response.json()["detail"]
    current = api.get("/rules/hot").json()
    assert (current["version"], current["when"]) == (1, HOT["when"])
    assert api.get("/rules/hot/versions").json()["count"] == 1
    api.publisher.failing = False
    assert put(api, HOT | {"when": "temperature > 99"}).json()["version"] == 2


def test_rules_are_listed_by_id_in_pages(api: Api) -> None:
    for rule_id in ("c", "a", "b"):
        put(api, HOT | {"id": rule_id})
    delete(api, "b")
    page = api.get("/rules", params={"limit": 1, "offset": 1}).json()
    assert (page["count"], [r["id"] for r in page["data"]]) == (2, ["c"])
    assert [r["id"] for r in api.get("/rules").json()["data"]] == ["a", "c"]


def test_a_write_that_waits_too_long_for_the_others_is_a_503(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publishing, "LOCK_WAIT_S", 0.2)
    with publishing._WRITING:  # another write holds the lock
        response = put(api, HOT)
        assert response.status_code == 503
        assert "held the lock for 0.2 s; retry" in response.json()["detail"]
        moved = api.post("/devices", json={"device_id": "p1", "kind": "pump"})
        assert moved.status_code == 503
    assert api.get("/rules/hot").status_code == 404
    assert api.get("/devices/p1").status_code == 404
    assert put(api, HOT).status_code == 201
