"""`fleetwatch rules list | show | apply | delete` against the API app in-process (its HTTP
calls go to the app's test client): outcomes, --json, refusals and a missing API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from fleetwatch.cli.main import app
from fleetwatch.cli.rules import default_url
from tests.unit.api_support import Api, running_api

URL = "http://testserver"

RULES_YAML = """\
- id: hot
  name: Too hot
  severity: critical
  when: temperature > 80
- id: shaking
  name: Pumps shaking
  when: avg(vibration) > 7
  window: {size: 5 minutes, slide: 1 minute}
  select: {kinds: [pump]}
"""


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    monkeypatch.setenv("FLEETWATCH_RUN_DIR", str(tmp_path / "run"))
    running = running_api(tmp_path / "api")
    api = next(running)

    def request(method: str, url: str, **kw: Any) -> httpx.Response:
        if not url.startswith(URL):
            raise httpx.ConnectError(f"[Errno 111] Connection refused: {url}")
        kw.pop("timeout")  # the test client has none
        response: httpx.Response = api.client.request(method, url, **kw)
        return response

    monkeypatch.setattr(httpx, "request", request)
    monkeypatch.setenv("FLEETWATCH_API_URL", URL)
    monkeypatch.setenv("FLEETWATCH_API_KEY", api.keys["admin"])
    yield api
    next(running, None)  # the app stops


def rules(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, ["rules", *args], env=env)


def written(tmp_path: Path, text: str, name: str = "rules.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_apply_creates_then_leaves_alone_then_changes(api: Api, tmp_path: Path) -> None:
    file = written(tmp_path, RULES_YAML)
    first = rules("apply", str(file))
    assert first.exit_code == 0, first.output
    assert first.output.splitlines() == ["hot: created (version 1)", "shaking: created (version 1)"]
    again = rules("apply", str(file), "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output) == [
        {"id": "hot", "outcome": "unchanged", "version": 1, "error": None},
        {"id": "shaking", "outcome": "unchanged", "version": 1, "error": None},
    ]
    file.write_text(RULES_YAML.replace("> 80", "> 85"))
    changed = rules("apply", str(file))
    assert changed.output.splitlines() == [
        "hot: changed (version 2)",
        "shaking: unchanged (version 1)",
    ]
    assert [r for r, _ in api.publisher.rules] == ["hot", "shaking", "hot"]


def test_apply_reads_one_rule_from_a_json_file(api: Api, tmp_path: Path) -> None:
    file = written(tmp_path, json.dumps({"id": "cold", "name": "Cold", "when": "t < 0"}), "r.json")
    result = rules("apply", str(file))
    assert (result.exit_code, result.output.strip()) == (0, "cold: created (version 1)")
    assert api.get("/rules/cold").json()["when"] == "t < 0"


def test_a_rule_the_api_refuses_is_reported_and_the_others_applied(
    api: Api, tmp_path: Path
) -> None:
    api.checker.refused["temperature > 80"] = ("when", "[PARSE_SYNTAX_ERROR] at '>'")
    result = rules("apply", str(written(tmp_path, RULES_YAML)))
    assert result.exit_code == 1
    assert "hot: failed: 422 when: [PARSE_SYNTAX_ERROR] at '>'" in result.output
    assert "shaking: created (version 1)" in result.output
    assert "not applied: hot" in result.output
    assert [r for r, _ in api.publisher.rules] == ["shaking"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "- id: a\n  name: A\n- id: b\n  name: B\n  when: x > 1\n",
            "[0] (a): when: Field required",
        ),
        ("id: a\nname: A\nwhen: x\nwindow: {size: 5 parsecs}\n", "window.size: Value error"),
        ("- id: a\n  name: A\n  when: x\n- id: a\n  name: B\n  when: y\n", "id more than once (a)"),
        ("- just a string\n", "a rule is a mapping"),
        ("[]\n", "holds no rule"),
        ("id: [unclosed\n", "is not YAML or JSON"),
    ],
)
def test_a_file_with_a_bad_rule_sends_nothing(
    api: Api, tmp_path: Path, text: str, says: str
) -> None:
    result = rules("apply", str(written(tmp_path, text)))
    assert result.exit_code == 1
    assert says in " ".join(result.output.split())
    assert api.publisher.rules == []
    assert api.checker.checked == []


def test_list_and_show_with_and_without_json(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fleetwatch.cli.rules.console", Console(width=200, soft_wrap=True))
    rules("apply", str(written(tmp_path, RULES_YAML)))
    listed = rules("list", "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output) == api.get("/rules").json()["data"]
    table = rules("list")
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in table.output.splitlines()]
    assert ["hot", "1", "critical", "temperature > 80", "-", "all", "Too hot"] in rows
    assert [
        "shaking",
        "1",
        "warning",
        "avg(vibration) > 7",
        "5 minutes, every 1 minute",
        "0",
        "Pumps shaking",
    ] in rows
    shown = rules("show", "shaking")
    assert shown.exit_code == 0, shown.output
    assert "when: avg(vibration) > 7" in shown.output
    assert "# version 1, by admin-key" in shown.output
    assert "judges: none" in shown.output  # no device of kind pump registered
    as_json = rules("show", "hot", "--json")
    assert json.loads(as_json.output) == api.get("/rules/hot").json()


def test_list_reads_every_page(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fleetwatch.cli.rules.PAGE", 2)
    for i in range(5):
        api.post("/rules", json={"id": f"r{i}", "name": "n", "when": "x > 1"})
    listed = rules("list", "--json")
    assert [r["id"] for r in json.loads(listed.output)] == [f"r{i}" for i in range(5)]


def test_delete_and_a_rule_that_is_not_there(api: Api, tmp_path: Path) -> None:
    rules("apply", str(written(tmp_path, RULES_YAML)))
    deleted = rules("delete", "hot", "--json")
    assert (deleted.exit_code, json.loads(deleted.output)) == (0, {"id": "hot", "deleted": True})
    assert api.publisher.rules[-1] == ("hot", None)
    again = rules("delete", "hot")
    assert again.exit_code == 1
    assert "DELETE /rules/hot: 404 no rule 'hot'" in again.output
    shown = rules("show", "hot")
    assert shown.exit_code == 1
    assert "deleted (version 2)" in shown.output


def test_the_key_comes_from_the_option_or_the_environment(api: Api, tmp_path: Path) -> None:
    file = str(written(tmp_path, RULES_YAML))
    as_reader = rules("apply", file, "--api-key", api.keys["read"])
    assert as_reader.exit_code == 1
    assert "lacks the 'admin' scope" in as_reader.output
    assert rules("list", "--api-key", api.keys["read"]).exit_code == 0
    keyless = rules("list", env={"FLEETWATCH_API_KEY": ""})
    assert keyless.exit_code == 1
    assert "401 a valid API key is required" in keyless.output


def test_an_api_that_does_not_answer_is_one_line(api: Api) -> None:
    result = rules("list", "--api-url", "http://127.0.0.1:9")
    assert result.exit_code == 1
    assert "the API at http://127.0.0.1:9 did not answer GET /rules" in result.output


def test_the_default_address_is_the_settings_api_as_this_host_reaches_it() -> None:
    assert default_url("127.0.0.1", 8000) == "http://127.0.0.1:8000"
    assert default_url("0.0.0.0", 8080) == "http://127.0.0.1:8080"
    assert default_url("::", 8000) == "http://[::1]:8000"
    assert default_url("api.internal", 80) == "http://api.internal:80"


def test_a_refused_change_says_which_version_stays(api: Api, tmp_path: Path) -> None:
    file = written(tmp_path, "id: cold\nname: Cold\nwhen: t < 0\n")
    rules("apply", str(file))
    api.checker.refused["t < -"] = ("when", "[PARSE_SYNTAX_ERROR]")
    file.write_text("id: cold\nname: Cold\nwhen: t < -\n")
    result = rules("apply", str(file))
    assert result.exit_code == 1
    assert "cold: failed: 422 when: [PARSE_SYNTAX_ERROR]; version 1 stays in force" in result.output
