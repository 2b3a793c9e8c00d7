"""Operators' rules through the API and the CLI on the real stack: each write is a record on
the test's own ``rules`` topic before it is answered (version 1, 2, a device registered
publishes the same version with its devices, a tombstone on delete), and Spark's own checker,
in the API's child process, refuses a condition it cannot analyse. On PostgreSQL: the rules'
tables, their queries, and rule writes waiting for the advisory lock another API process
holds."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from fleetwatch.contracts.rules import decode, rule_key
from fleetwatch.contracts.settings import Settings
from fleetwatch.serving.app import create_app
from fleetwatch.serving.rules import publish as publishing
from fleetwatch.serving.rules.publish import ADVISORY_LOCK
from fleetwatch.serving.store import Store
from fleetwatch.serving.store.ingest import Batch, write
from tests.integration.api_stack import ApiProcess, admin_key, start_api
from tests.integration.conftest import Isolated, Record, fleetwatch
from tests.integration.postgres import fresh_database, postgres_server
from tests.polling import wait_until
from tests.unit.api_support import FakeChecker, FakePublisher, add_keys
from tests.unit.test_api_rules_selection import rule_alert

CHECKED_S = 180
"""The API's first write waits for its checker's JVM to start."""


def put(api: ApiProcess, rule: dict[str, Any]) -> httpx.Response:
    return httpx.put(
        f"{api.base}/rules/{rule['id']}",
        json=rule,
        headers={"X-API-Key": api.key},
        timeout=CHECKED_S,
    )


def records(isolated: Isolated, rule_id: str, expected: int) -> list[Record]:
    """The rule's records on the test's rules topic, in order, once ``expected`` are there (the
    API publishes a write's record before it answers: what it wrote is in the topic by then)."""
    topic = isolated.topics.rules
    key = rule_key(rule_id).encode()
    ours: list[Record] = []

    def enough() -> bool:
        ours[:] = [r for r in isolated.read_to_end(topic) if r.key == key]
        return len(ours) >= expected

    with contextlib.suppress(AssertionError):
        wait_until(enough, 30, f"{expected} records of {rule_id} on {topic}")
    assert len(ours) == expected, f"{len(ours)} records of {rule_id} on {topic}, not {expected}"
    return ours


def test_rule_writes_are_on_the_rules_topic_in_order_and_spark_refuses_a_bad_one(
    isolated: Isolated, tmp_path: Path
) -> None:
    run_dir = Path(isolated.env["FLEETWATCH_RUN_DIR"])
    api = start_api(isolated, admin_key(run_dir))
    rule = {
        "id": "hot",
        "name": "Too hot",
        "severity": "critical",
        "when": "temperature > 80",
        "select": {"kinds": ["pump"]},
    }

    created = put(api, rule)
    assert created.status_code == 201, created.text
    [first] = records(isolated, "hot", 1)
    assert (decode(first.value).version, decode(first.value).devices) == (1, [])

    changed = put(api, rule | {"when": "temperature > 85"})
    assert (changed.status_code, changed.json()["version"]) == (200, 2), changed.text
    second = decode(records(isolated, "hot", 2)[1].value)
    assert (second.version, second.when) == (2, "temperature > 85")

    assert api.post("/devices", json={"device_id": "p1", "kind": "pump"}).status_code == 201
    moved = decode(records(isolated, "hot", 3)[2].value)
    assert (moved.version, moved.devices, moved.when) == (2, ["p1"], "temperature > 85")

    deleted = httpx.delete(f"{api.base}/rules/hot", headers={"X-API-Key": api.key}, timeout=30)
    assert deleted.status_code == 204, deleted.text
    assert records(isolated, "hot", 4)[3].value == b""  # a tombstone

    refused = put(api, rule | {"id": "typo", "when": "temperature >> 80 AND"})
    assert refused.status_code == 422, refused.text
    [problem] = refused.json()["detail"]
    assert problem["loc"] == ["body", "when"]
    assert "PARSE_SYNTAX_ERROR" in problem["msg"]
    unwindowed = put(api, rule | {"id": "shaking", "when": "avg(vibration) > 7"})
    assert unwindowed.status_code == 422, unwindowed.text
    assert unwindowed.json()["detail"][0]["loc"] == ["body", "window"]
    assert api.get("/rules/typo").status_code == 404
    assert api.get("/rules/shaking").status_code == 404

    # the CLI: a file applied, the same again, then deleted
    file = tmp_path / "rules.yaml"
    file.write_text("id: cold\nname: Too cold\nwhen: temperature < 0\n")
    cli_env = isolated.env | {"FLEETWATCH_API_URL": api.base, "FLEETWATCH_API_KEY": api.key}
    applied = fleetwatch("rules", "apply", str(file), env=cli_env)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.strip() == "cold: created (version 1)"
    again = fleetwatch("rules", "apply", str(file), env=cli_env)
    assert again.stdout.strip() == "cold: unchanged (version 1)"
    file.write_text("id: cold\nname: Too cold\nwhen: temperature < -\n")
    bad = fleetwatch("rules", "apply", str(file), env=cli_env)
    assert bad.returncode == 1
    assert "cold: failed: 422 when: [PARSE_SYNTAX_ERROR]" in bad.stdout
    assert "version 1 stays in force" in bad.stdout
    assert fleetwatch("rules", "delete", "cold", env=cli_env).returncode == 0
    cold = records(isolated, "cold", 2)
    assert decode(cold[0].value).version == 1
    assert cold[1].value == b""


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with postgres_server() as server, fresh_database(server) as url:
        yield url


def test_rules_on_postgresql_and_writes_wait_for_another_process_holding_the_lock(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(pg_url)
    keys = add_keys(store)
    publisher = FakePublisher()
    app = create_app(
        Settings(run_dir=tmp_path),
        store=store,
        materialise=False,
        publisher=publisher,
        workers=False,
        checker=FakeChecker(),
    )
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    pumps: dict[str, Any] = {
        "id": "pumps",
        "name": "Pumps",
        "when": "vibration > 7",
        "select": {"kinds": ["pump"], "tags": ["north"]},
    }
    try:
        with TestClient(app) as client:
            device = {"device_id": "p1", "kind": "fan", "tags": ["north"]}
            assert client.post("/devices", json=device, headers=admin).status_code == 201
            created = client.put("/rules/pumps", json=pumps, headers=admin)
            assert (created.status_code, created.json()["devices"]) == (201, ["p1"])
            changed = client.put("/rules/pumps", json=pumps | {"when": "x > 1"}, headers=admin)
            assert changed.json()["version"] == 2
            moved = client.patch("/devices/p1", json={"tags": []}, headers=admin)
            assert moved.status_code == 200
            assert decode(publisher.rules[-1][1] or b"").devices == []
            assert client.delete("/rules/pumps", headers=admin).status_code == 204
            versions = client.get("/rules/pumps/versions", headers=admin).json()["data"]
            assert [(v["version"], v["deleted"]) for v in versions] == [
                (3, True),
                (2, False),
                (1, False),
            ]
            assert client.get("/rules", headers=admin).json()["count"] == 0

            with store.session() as session, session.begin():
                write(session, Batch(alerts=[rule_alert("p1", "pumps", 2)]), 1)
            found = client.get("/alerts", params={"rule_id": "pumps"}, headers=admin).json()
            assert [(a["rule_id"], a["rule_version"]) for a in found["data"]] == [("pumps", 2)]

            answers: list[httpx.Response] = []
            writer = threading.Thread(
                target=lambda: answers.append(
                    client.put("/rules/hot", json=pumps | {"id": "hot"}, headers=admin)
                )
            )
            with store.engine.connect() as other, other.begin():  # another API process
                other.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK})
                writer.start()
                writer.join(timeout=2)
                assert writer.is_alive(), "a rule write did not wait for the lock"
                assert answers == []
            writer.join(timeout=30)
            assert [a.status_code for a in answers] == [201]
            assert publisher.rules[-1][0] == "hot"

            monkeypatch.setattr(publishing, "LOCK_WAIT_S", 1.0)
            with store.engine.connect() as other, other.begin():  # held for longer
                other.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK})
                busy = client.put("/rules/busy", json=pumps | {"id": "busy"}, headers=admin)
            assert busy.status_code == 503
            assert "another API process held the rules' lock" in busy.json()["detail"]
            assert client.get("/rules/busy", headers=admin).status_code == 404
    finally:
        store.close()
