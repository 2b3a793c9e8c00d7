"""`fleetwatch grafana push` against a stand-in Grafana: a real HTTP server on loopback that
answers the endpoints the push uses as Grafana's API does and records every request.
grafana-client talks through niquests, whose transport cannot be swapped for a fake, so the
calls cross a real socket."""

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

from fleetwatch.cli.main import app
from fleetwatch.observability import dashboards
from fleetwatch.observability.errors import GrafanaPushError
from fleetwatch.observability.push import push


@dataclass
class FakeGrafana:
    """What the stand-in holds: folders and datasources by uid, dashboards by uid with their
    version, every request as (method, path, Authorization, JSON body)."""

    folders: dict[str, dict[str, Any]] = field(default_factory=dict)
    datasources: dict[str, dict[str, Any]] = field(default_factory=dict)
    dashboards: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, str, Any]] = field(default_factory=list)
    token: str = "glsa_test"

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
            return (200, found) if found else (404, {"message": "Data source not found"})
        if method == "POST" and path == "/api/datasources":
            if body["uid"] in self.datasources:
                return 409, {"message": "data source with the same uid already exists"}
            self.datasources[body["uid"]] = body
            return 200, {"datasource": body, "message": "Datasource added"}
        if method == "POST" and path == "/api/dashboards/db":
            model = body["dashboard"]
            uid = model["uid"]
            if uid in self.dashboards and not body.get("overwrite"):
                return 412, {"message": "A dashboard with the same uid already exists"}
            version = self.dashboards.get(uid, {}).get("version", 0) + 1
            self.dashboards[uid] = {"model": model, "version": version, "folder": body["folderUid"]}
            return 200, {"status": "success", "uid": uid, "version": version, "url": f"/d/{uid}"}
        return 404, {"message": "Not found"}


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


def test_a_push_creates_what_is_missing_and_a_second_one_only_new_versions(
    grafana: tuple[FakeGrafana, str],
) -> None:
    state, url = grafana
    api = GrafanaApi.from_url(url, credential=state.token)
    models = dashboards.models()
    database = "postgresql+psycopg://reader:secret@db.example:5432/fleetwatch"

    first = push(api, models, "http://prometheus:9090", database)
    assert sorted(first.created) == [
        "datasource fleetwatch-db",
        "datasource prometheus",
        "folder fleetwatch",
    ]
    assert state.datasources["prometheus"]["url"] == "http://prometheus:9090"
    db = state.datasources["fleetwatch-db"]
    assert db["type"] == "grafana-postgresql-datasource"
    assert (db["url"], db["user"], db["jsonData"]["database"]) == (
        "db.example:5432",
        "reader",
        "fleetwatch",
    )
    assert db["secureJsonData"] == {"password": "secret"}
    assert {p.uid: p.version for p in first.dashboards} == {
        "fleetwatch-fleet": 1,
        "fleetwatch-device": 1,
        "fleetwatch-pipeline": 1,
    }

    state.requests.clear()
    second = push(api, models, "http://elsewhere:9090", database)
    assert second.created == []
    assert {p.uid: p.version for p in second.dashboards} == {
        "fleetwatch-fleet": 2,
        "fleetwatch-device": 2,
        "fleetwatch-pipeline": 2,
    }
    assert state.datasources["prometheus"]["url"] == "http://prometheus:9090", "never changed"
    posts = [(m, p) for m, p, _, _ in state.requests if m == "POST"]
    assert posts == [("POST", "/api/dashboards/db")] * 3, "nothing but the dashboards again"
    for _, path, auth, body in state.requests:
        assert auth == f"Bearer {state.token}"
        if path == "/api/dashboards/db":
            assert body["overwrite"] is True
            assert body["folderUid"] == "fleetwatch"
            assert "id" not in body["dashboard"], "Grafana matches by uid"
            assert body["dashboard"] == {
                k: v for k, v in models[_name(body)].items() if k not in ("id", "version")
            }


def _name(body: dict[str, Any]) -> str:
    return str(body["dashboard"]["uid"]).removeprefix("fleetwatch-")


def test_without_a_database_url_the_missing_sql_datasource_is_reported(
    grafana: tuple[FakeGrafana, str],
) -> None:
    state, url = grafana
    report = push(GrafanaApi.from_url(url, credential=state.token), dashboards.models(), "http://p")
    assert report.missing == ["fleetwatch-db"]
    assert "fleetwatch-db" not in state.datasources
    assert len(report.dashboards) == 3


def test_a_refused_token_is_one_error_naming_it(grafana: tuple[FakeGrafana, str]) -> None:
    _, url = grafana
    with pytest.raises(GrafanaPushError, match="Unauthorized"):
        push(GrafanaApi.from_url(url, credential="wrong"), dashboards.models(), "http://p")


def test_the_command_pushes_and_prints_each_dashboard(grafana: tuple[FakeGrafana, str]) -> None:
    state, url = grafana
    result = CliRunner().invoke(
        app,
        ["grafana", "push", "--url", url, "--token", state.token, "--prometheus-url", "http://p"],
    )
    assert result.exit_code == 0, result.output
    assert "fleetwatch · Fleet: version 1" in result.output
    assert "no datasource 'fleetwatch-db'" in result.output
    assert set(state.dashboards) == {"fleetwatch-fleet", "fleetwatch-device", "fleetwatch-pipeline"}
