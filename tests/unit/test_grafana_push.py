"""`fleetwatch grafana push` against a stand-in Grafana: a real HTTP server on loopback that
answers the endpoints the push uses as Grafana's API does (shapes and status codes from its HTTP
API reference and its ``pkg/api/datasource.go``) and records every request. grafana-client talks
through niquests, not httpx, so there is no MockTransport to hand it; a niquests adapter would
skip the wire, so the calls cross a real socket. Grafana itself cannot be installed here."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from grafana_client.api import GrafanaApi
from typer.testing import CliRunner

from fleetwatch.cli.grafana import SslModeChoice
from fleetwatch.cli.main import app
from fleetwatch.observability import dashboards
from fleetwatch.observability.errors import GrafanaPushError
from fleetwatch.observability.push import SSL_MODES, push

DATABASE = "postgresql+psycopg://reader:secret@db.example:5432/fleetwatch"


@dataclass
class FakeGrafana:
    """What the stand-in holds: folders and datasources by uid (as stored, secrets included),
    dashboards by uid with their version, every request as (method, path, Authorization, JSON
    body)."""

    folders: dict[str, dict[str, Any]] = field(default_factory=dict)
    datasources: dict[str, dict[str, Any]] = field(default_factory=dict)
    dashboards: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, str, Any]] = field(default_factory=list)
    token: str = "glsa_test"
    next_id: int = 1

    def add_datasource(self, **stored: Any) -> dict[str, Any]:
        """A datasource as Grafana stores it (``readOnly`` when provisioned from a file)."""
        stored = {"access": "proxy", "jsonData": {}, "readOnly": False, **stored}
        stored.update(id=self.next_id, orgId=1, version=stored.get("version", 1))
        stored.setdefault("secureJsonData", {})
        self.next_id += 1
        self.datasources[stored["uid"]] = stored
        return stored

    def _read(self, stored: dict[str, Any]) -> dict[str, Any]:
        """A GET's answer: secrets are never returned, only which ones are set."""
        shown = {k: v for k, v in stored.items() if k != "secureJsonData"}
        shown["secureJsonFields"] = {key: True for key in stored["secureJsonData"]}
        return shown

    def _name_taken(self, name: str, uid: str) -> bool:
        return any(d["name"] == name and d["uid"] != uid for d in self.datasources.values())

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if path == "/api/frontend/settings":
            return 200, {"buildInfo": {"version": "12.0.0"}}
        if method == "GET" and path.startswith("/api/folders/"):
            uid = path.rsplit("/", 1)[1]
            found = self.folders.get(uid)
            return (200, found) if found else (404, {"message": "folder not found"})
        if method == "POST" and path == "/api/folders":
            self.folders[body["uid"]] = {"uid": body["uid"], "title": body["title"]}
            return 200, self.folders[body["uid"]]
        if method == "GET" and path.startswith("/api/datasources/uid/"):
            uid = path.rsplit("/", 1)[1]
            found = self.datasources.get(uid)
            return (
                (200, self._read(found)) if found else (404, {"message": "Data source not found"})
            )
        if method == "POST" and path == "/api/datasources":
            if body["uid"] in self.datasources:
                return 409, {"message": "data source with the same uid already exists"}
            if self._name_taken(body["name"], body["uid"]):
                return 409, {"message": "data source with the same name already exists"}
            stored = self.add_datasource(**body)
            return 200, {"datasource": self._read(stored), "message": "Datasource added"}
        if method == "PUT" and path.startswith("/api/datasources/uid/"):
            return self._update(path.rsplit("/", 1)[1], body)
        if method == "POST" and path == "/api/dashboards/db":
            model = body["dashboard"]
            uid = model["uid"]
            if uid in self.dashboards and not body.get("overwrite"):
                return 412, {"message": "A dashboard with the same uid already exists"}
            version = self.dashboards.get(uid, {}).get("version", 0) + 1
            self.dashboards[uid] = {"model": model, "version": version, "folder": body["folderUid"]}
            return 200, {"status": "success", "uid": uid, "version": version, "url": f"/d/{uid}"}
        return 404, {"message": "Not found"}

    def _update(self, uid: str, body: dict[str, Any]) -> tuple[int, Any]:
        """Grafana's update: every field replaced by the body's (missing ones emptied), secrets
        not sent kept; refused for a provisioned datasource, a stale version, a taken name."""
        stored = self.datasources.get(uid)
        if stored is None:
            return 404, {"message": "Data source not found"}
        if stored["readOnly"]:
            return 403, {"message": "Cannot update read-only data source"}
        if body.get("version") and body["version"] < stored["version"]:
            return 409, {
                "message": "Datasource has already been updated by someone else. "
                "Please reload and try again"
            }
        if self._name_taken(body.get("name", ""), uid):
            return 409, {"message": "Failed to update datasource: data source name exists"}
        secrets = {**stored["secureJsonData"], **body.get("secureJsonData", {})}
        replaced = {
            "uid": body.get("uid") or uid,
            "name": body.get("name", ""),
            "type": body.get("type", ""),
            "access": body.get("access", ""),
            "url": body.get("url", ""),
            "user": body.get("user", ""),
            "isDefault": body.get("isDefault", False),
            "jsonData": body.get("jsonData") or {},
            "secureJsonData": secrets,
            "readOnly": False,
            "id": stored["id"],
            "orgId": 1,
            "version": stored["version"] + 1,
        }
        del self.datasources[uid]
        self.datasources[replaced["uid"]] = replaced
        return 200, {"datasource": self._read(replaced), "message": "Datasource updated"}


def handler(grafana: FakeGrafana) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length)) if length else None
            auth = self.headers.get("Authorization", "")
            grafana.requests.append((method, self.path, auth, body))
            if auth != f"Bearer {grafana.token}":
                status, answer = 401, {"message": "Unauthorized"}
            else:
                status, answer = grafana.answer(method, self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def grafana() -> Iterator[tuple[FakeGrafana, str]]:
    state = FakeGrafana()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(state))
    thread = threading.Thread(target=server.serve_forever, name="fake-grafana")
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _api(state: FakeGrafana, url: str) -> GrafanaApi:
    api: GrafanaApi = GrafanaApi.from_url(url, credential=state.token)
    return api


def _name(body: dict[str, Any]) -> str:
    return str(body["dashboard"]["uid"]).removeprefix("fleetwatch-")


def test_a_push_creates_what_is_missing_and_a_second_one_updates_it(
    grafana: tuple[FakeGrafana, str],
) -> None:
    state, url = grafana
    api = _api(state, url)
    models = dashboards.models()

    first = push(api, models, "http://prometheus:9090", DATABASE)
    assert first.created == ["folder fleetwatch"]
    assert [(w.action, w.uid, w.url) for w in first.datasources] == [
        ("created", "prometheus", "http://prometheus:9090"),
        ("created", "fleetwatch-db", "db.example:5432"),
    ]
    assert first.missing == first.provisioned == []
    prometheus = state.datasources["prometheus"]
    assert (prometheus["type"], prometheus["url"]) == ("prometheus", "http://prometheus:9090")
    db = state.datasources["fleetwatch-db"]
    assert db["type"] == "grafana-postgresql-datasource"
    assert (db["url"], db["user"], db["jsonData"]) == (
        "db.example:5432",
        "reader",
        {"database": "fleetwatch", "sslmode": "require"},
    )
    assert db["secureJsonData"] == {"password": "secret"}
    assert {p.uid: p.version for p in first.dashboards} == {
        "fleetwatch-fleet": 1,
        "fleetwatch-device": 1,
        "fleetwatch-pipeline": 1,
    }

    state.requests.clear()
    second = push(api, models, "http://elsewhere:9090", DATABASE, "verify-full")
    assert second.created == []
    assert [(w.action, w.uid) for w in second.datasources] == [
        ("updated", "prometheus"),
        ("updated", "fleetwatch-db"),
    ]
    assert {p.uid: p.version for p in second.dashboards} == {
        "fleetwatch-fleet": 2,
        "fleetwatch-device": 2,
        "fleetwatch-pipeline": 2,
    }
    assert state.datasources["prometheus"]["url"] == "http://elsewhere:9090"
    assert state.datasources["fleetwatch-db"]["jsonData"]["sslmode"] == "verify-full"
    writes = [(m, p) for m, p, _, _ in state.requests if m in ("POST", "PUT")]
    assert (
        writes
        == [
            ("PUT", "/api/datasources/uid/prometheus"),
            ("PUT", "/api/datasources/uid/fleetwatch-db"),
        ]
        + [("POST", "/api/dashboards/db")] * 3
    ), "no datasource created twice"
    for _, path, auth, body in state.requests:
        assert auth == f"Bearer {state.token}"
        if path == "/api/dashboards/db":
            assert body["overwrite"] is True
            assert body["folderUid"] == "fleetwatch"
            assert "id" not in body["dashboard"], "Grafana matches by uid"
            assert body["dashboard"] == {
                k: v for k, v in models[_name(body)].items() if k not in ("id", "version")
            }


def test_an_update_keeps_what_the_user_set_and_changes_only_fleetwatchs_fields(
    grafana: tuple[FakeGrafana, str],
) -> None:
    state, url = grafana
    state.add_datasource(
        uid="fleetwatch-db",
        name="our postgres",
        type="grafana-postgresql-datasource",
        url="old-db:5432",
        user="old",
        isDefault=True,
        version=7,
        jsonData={"database": "old", "sslmode": "disable", "postgresVersion": 1500},
        secureJsonData={"password": "old-secret", "tlsCACert": "PEM"},
    )
    report = push(_api(state, url), {}, database_url=DATABASE + "?sslmode=verify-ca")
    assert [(w.action, w.uid) for w in report.datasources] == [("updated", "fleetwatch-db")]
    assert report.missing == ["prometheus"]
    db = state.datasources["fleetwatch-db"]
    assert (db["name"], db["isDefault"], db["url"], db["user"]) == (
        "our postgres",
        True,
        "db.example:5432",
        "reader",
    )
    assert db["jsonData"] == {
        "database": "fleetwatch",
        "sslmode": "verify-ca",
        "postgresVersion": 1500,
    }
    assert db["secureJsonData"] == {"password": "secret", "tlsCACert": "PEM"}
    (put,) = [body for method, _, _, body in state.requests if method == "PUT"]
    assert put["version"] == 7, "Grafana refuses it if someone changed the datasource since"


def test_without_addresses_grafanas_datasources_are_left_and_the_missing_ones_reported(
    grafana: tuple[FakeGrafana, str],
) -> None:
    state, url = grafana
    state.add_datasource(uid="prometheus", name="Prometheus", type="prometheus", url="http://p")
    report = push(_api(state, url), dashboards.models())
    assert report.datasources == []
    assert report.missing == ["fleetwatch-db"]
    assert "fleetwatch-db" not in state.datasources
    assert state.datasources["prometheus"]["url"] == "http://p"
    assert not [
        m for m, p, _, _ in state.requests if p.startswith("/api/datasources") and m != "GET"
    ]
    assert len(report.dashboards) == 3


def test_a_provisioned_datasource_is_left_as_it_is(grafana: tuple[FakeGrafana, str]) -> None:
    state, url = grafana
    state.add_datasource(
        uid="prometheus", name="Prometheus", type="prometheus", url="http://p", readOnly=True
    )
    report = push(_api(state, url), {}, "http://elsewhere:9090")
    assert report.provisioned == ["prometheus"]
    assert report.datasources == []
    assert state.datasources["prometheus"]["url"] == "http://p"


def test_a_datasource_of_that_uid_but_another_type_is_refused(
    grafana: tuple[FakeGrafana, str],
) -> None:
    state, url = grafana
    state.add_datasource(uid="prometheus", name="Logs", type="loki", url="http://loki")
    with pytest.raises(GrafanaPushError, match="'loki'"):
        push(_api(state, url), {}, "http://prometheus:9090")
    assert state.datasources["prometheus"]["type"] == "loki"


def test_a_name_another_datasource_has_is_grafanas_refusal_named(
    grafana: tuple[FakeGrafana, str],
) -> None:
    state, url = grafana
    state.add_datasource(uid="other", name="fleetwatch API database", type="postgres", url="x")
    with pytest.raises(GrafanaPushError, match="same name"):
        push(_api(state, url), {}, database_url=DATABASE)


@pytest.mark.parametrize(
    ("given", "url_query", "stored"),
    [
        (None, "", "require"),
        (None, "?sslmode=disable", "disable"),
        ("verify-full", "?sslmode=disable", "verify-full"),
    ],
)
def test_the_database_tls_mode_is_the_option_else_the_urls_else_require(
    grafana: tuple[FakeGrafana, str], given: str | None, url_query: str, stored: str
) -> None:
    state, url = grafana
    push(_api(state, url), {}, database_url=DATABASE + url_query, database_sslmode=given)
    assert state.datasources["fleetwatch-db"]["jsonData"]["sslmode"] == stored


@pytest.mark.parametrize("database_url", [DATABASE + "?sslmode=prefer", DATABASE])
def test_a_tls_mode_grafana_lacks_is_refused_before_any_request(
    grafana: tuple[FakeGrafana, str], database_url: str
) -> None:
    state, url = grafana
    sslmode = None if "prefer" in database_url else "allow"
    with pytest.raises(GrafanaPushError, match="disable, require, verify-ca, verify-full"):
        push(_api(state, url), {}, database_url=database_url, database_sslmode=sslmode)
    assert state.requests == []


def test_the_commands_tls_choices_are_grafanas() -> None:
    assert tuple(choice.value for choice in SslModeChoice) == SSL_MODES


def test_a_refused_token_is_one_error_naming_it(grafana: tuple[FakeGrafana, str]) -> None:
    _, url = grafana
    with pytest.raises(GrafanaPushError, match="Unauthorized"):
        push(GrafanaApi.from_url(url, credential="wrong"), dashboards.models(), "http://p")


def test_the_command_pushes_and_prints_what_it_wrote(grafana: tuple[FakeGrafana, str]) -> None:
    state, url = grafana
    base = ["grafana", "push", "--url", url, "--token", state.token]
    result = CliRunner().invoke(app, [*base, "--prometheus-url", "http://p"])
    assert result.exit_code == 0, result.output
    assert "created datasource prometheus (http://p)" in result.output
    assert "fleetwatch · Fleet: version 1" in result.output
    assert "no datasource 'fleetwatch-db'" in result.output
    assert "--database-url" in result.output
    assert set(state.dashboards) == {"fleetwatch-fleet", "fleetwatch-device", "fleetwatch-pipeline"}

    again = CliRunner().invoke(
        app,
        [
            *base,
            *("--prometheus-url", "http://q"),
            *("--database-url", DATABASE),
            *("--database-sslmode", "disable"),
        ],
    )
    assert again.exit_code == 0, again.output
    assert "updated datasource prometheus (http://q)" in again.output
    assert "created datasource fleetwatch-db (db.example:5432)" in again.output
    assert state.datasources["fleetwatch-db"]["jsonData"]["sslmode"] == "disable"


def test_the_command_reports_as_one_json_document(grafana: tuple[FakeGrafana, str]) -> None:
    state, url = grafana
    args = ["grafana", "push", "--url", url, "--token", state.token, "--json"]
    result = CliRunner().invoke(app, [*args, "--prometheus-url", "http://p"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["datasources"] == [{"action": "created", "uid": "prometheus", "url": "http://p"}]
    assert {d["uid"] for d in report["dashboards"]} == set(state.dashboards)
    assert report["missing"] == ["fleetwatch-db"]


def test_the_command_refuses_a_tls_mode_grafana_lacks(grafana: tuple[FakeGrafana, str]) -> None:
    state, url = grafana
    result = CliRunner().invoke(
        app,
        [
            *("grafana", "push", "--url", url, "--token", state.token),
            *("--database-url", DATABASE, "--database-sslmode", "prefer"),
        ],
    )
    assert result.exit_code != 0
    assert state.requests == []
