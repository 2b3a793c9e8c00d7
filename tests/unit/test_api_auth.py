"""API keys and scopes: 401 without a valid key, 403 without the scope, secrets never shown."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetwatch.cli.main import app as cli
from fleetwatch.contracts.settings import Settings
from fleetwatch.serving.store import Store
from tests.unit.api_support import Api, running_api


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from running_api(tmp_path)


def test_no_key_or_a_bad_key_is_a_401_that_says_why(api: Api) -> None:
    missing = api.client.get("/alerts")
    assert missing.status_code == 401
    assert "API key is required" in missing.json()["detail"]
    assert missing.headers["www-authenticate"] == "Bearer"
    for bad in ("nonsense", "fwk_000000000000_wrong", api.keys["read"] + "x"):
        wrong = api.client.get("/alerts", headers={"X-API-Key": bad})
        assert wrong.status_code == 401
        assert "not valid" in wrong.json()["detail"]
    assert api.client.get("/alerts", headers={"X-API-Key": api.keys["read"]}).status_code == 200


def test_a_read_key_cannot_send_commands_acknowledge_or_administer(api: Api) -> None:
    api.post("/devices", json={"device_id": "d1"})
    command = api.post(
        "/devices/d1/commands",
        scope="read",
        headers={"Idempotency-Key": "k1"},
        json={"name": "reboot"},
    )
    assert command.status_code == 403
    assert command.json()["detail"] == ("this API key (read-key) lacks the 'operate' scope")
    assert api.publisher.published == []
    assert api.post("/alerts/a1/ack", scope="read", json={}).status_code == 403
    assert api.post("/devices", scope="operate", json={"device_id": "d2"}).status_code == 403
    assert (
        api.post("/keys", scope="operate", json={"name": "x", "scopes": ["read"]}).status_code
        == 403
    )


def test_a_read_key_cannot_see_webhooks_and_nobody_sees_a_secret_twice(api: Api) -> None:
    hook = api.post("/webhooks", json={"url": "https://93.184.215.14/in"})
    assert hook.status_code == 201, hook.text
    secret = hook.json()["secret"]
    assert secret.startswith("whsec_")
    webhook_id = hook.json()["webhook_id"]
    for path in ("/webhooks", f"/webhooks/{webhook_id}", f"/webhooks/{webhook_id}/deliveries"):
        denied = api.get(path, scope="read")
        assert denied.status_code == 403
        assert secret not in denied.text
        denied_op = api.get(path, scope="operate")
        assert denied_op.status_code == 403
        allowed = api.get(path, scope="admin")
        assert allowed.status_code == 200
        assert secret not in allowed.text
        assert "secret" not in allowed.text


def test_keys_are_created_listed_and_revoked_through_the_api(api: Api) -> None:
    made = api.post("/keys", json={"name": "grafana", "scopes": ["read"]})
    assert made.status_code == 201
    key, key_id = made.json()["key"], made.json()["key_id"]
    assert api.client.get("/alerts", headers={"X-API-Key": key}).status_code == 200
    listed = api.get("/keys", scope="admin").json()
    assert key not in json.dumps(listed)
    assert any(k["key_id"] == key_id for k in listed["data"])
    assert api.client.delete(f"/keys/{key_id}", headers=api.as_("admin")).status_code == 204
    assert api.client.get("/alerts", headers={"X-API-Key": key}).status_code == 401
    assert api.client.delete("/keys/nope", headers=api.as_("admin")).status_code == 404


def test_anonymous_read_lets_a_keyless_caller_read_only(tmp_path: Path) -> None:
    for api in running_api(tmp_path, anonymous_read=True):
        assert api.client.get("/alerts").status_code == 200
        denied = api.client.post("/devices", json={"device_id": "d1"})
        assert denied.status_code == 403
        assert denied.json()["detail"].startswith("anonymous callers may only read")
        assert api.client.get("/webhooks").status_code == 403


def test_the_cli_creates_lists_and_revokes_keys(tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"FLEETWATCH_RUN_DIR": str(tmp_path)}
    made = runner.invoke(
        cli, ["api", "keys", "create", "--name", "ops", "--scope", "admin", "--json"], env=env
    )
    assert made.exit_code == 0, made.output
    body = json.loads(made.stdout.strip().splitlines()[-1])
    assert body["key"].startswith(f"fwk_{body['key_id']}_")
    bad = runner.invoke(cli, ["api", "keys", "create", "--name", "x", "--scope", "root"], env=env)
    assert bad.exit_code == 1
    assert "scopes must be some of" in bad.output
    listed = runner.invoke(cli, ["api", "keys", "list", "--json"], env=env)
    assert [k["key_id"] for k in json.loads(listed.stdout)] == [body["key_id"]]
    assert runner.invoke(cli, ["api", "keys", "revoke", body["key_id"]], env=env).exit_code == 0
    assert runner.invoke(cli, ["api", "keys", "revoke", "nope"], env=env).exit_code == 1

    store = Store(Settings(run_dir=tmp_path).database_url)
    try:
        from fleetwatch.serving.store.keys import verify

        with store.session() as session:
            assert verify(session, body["key"]) is None  # revoked
    finally:
        store.close()
