"""`fleetwatch rules list | show | apply | delete`: operators' rules, through the HTTP API.

The API is at ``--api-url`` (or ``FLEETWATCH_API_URL``; default: settings ``api.host`` and
``api.port``), with the key ``--api-key`` (or ``FLEETWATCH_API_KEY``): reading needs the
``read`` scope, writing ``admin``."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from fleetwatch.cli.common import AsJson, fail, load_settings, print_json
from fleetwatch.contracts.rules import RuleSpec

app = typer.Typer(
    help="Operators' rules (Spark SQL conditions over readings), through the HTTP API.",
    no_args_is_help=True,
)
console = Console(soft_wrap=True)

READ_TIMEOUT_S = 30.0
WRITE_TIMEOUT_S = 180.0
"""A write waits for Spark to check the rule: the API's first check starts a JVM."""
PAGE = 1000

ApiUrl = Annotated[
    str | None,
    typer.Option(
        "--api-url",
        envvar="FLEETWATCH_API_URL",
        help="the API's base URL (default: http://{api.host}:{api.port} of the settings)",
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="FLEETWATCH_API_KEY",
        help="an API key (fwk_…): read scope to read, admin to write",
    ),
]
RuleIdArg = Annotated[str, typer.Argument(help="the rule's id")]


def default_url(host: str, port: int) -> str:
    """The API's address as a client on this host reaches it (a wildcard bind is loopback)."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # a name
    return f"http://{host}:{port}"


class Api:
    """The HTTP API: a failed call ends the command with the API's own words."""

    def __init__(self, url: str | None, key: str | None) -> None:
        if url is None:
            settings = load_settings()
            url = default_url(settings.api.host, settings.api.port)
        self.url = url.rstrip("/")
        self.headers = {"X-API-Key": key} if key else {}

    def request(self, method: str, path: str, body: Any = None) -> httpx.Response:
        """The API's answer, whatever its status."""
        timeout = READ_TIMEOUT_S if method == "GET" else WRITE_TIMEOUT_S
        try:
            return httpx.request(
                method, self.url + path, json=body, headers=self.headers, timeout=timeout
            )
        except httpx.HTTPError as exc:
            fail(f"the API at {self.url} did not answer {method} {path}: {exc}")

    def call(
        self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)
    ) -> httpx.Response:
        """The API's answer, which must have one of the ``ok`` statuses."""
        response = self.request(method, path, body)
        if response.status_code not in ok:
            fail(f"{method} {path}: {response.status_code} {problem(response)}")
        return response


def problem(response: httpx.Response) -> str:
    """The API's reason for a refusal, on one line (a 422 names each field it faults)."""
    try:
        detail = response.json()["detail"]
    except (ValueError, KeyError, TypeError):
        return response.text[:500] or response.reason_phrase
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', [])[1:]) or 'rule'}: {e.get('msg')}"
            for e in detail
            if isinstance(e, dict)
        )
    return str(detail)


@app.command(name="list")
def list_rules(api_url: ApiUrl = None, api_key: ApiKey = None, as_json: AsJson = False) -> None:
    """The rules in force (--json: an array of them, as the API gives them)."""
    api = Api(api_url, api_key)
    rules: list[dict[str, Any]] = []
    while True:
        page = api.call("GET", f"/rules?limit={PAGE}&offset={len(rules)}").json()
        rules.extend(page["data"])
        if not page["data"] or len(rules) >= page["count"]:
            break
    if as_json:
        print_json(rules)
        return
    table = Table("id", "version", "severity", "when", "window", "devices", "name")
    for r in rules:
        table.add_row(
            r["id"],
            str(r["version"]),
            r["severity"],
            r["when"],
            _window(r["window"]),
            "all" if r["devices"] is None else str(len(r["devices"])),
            r["name"],
        )
    console.print(table)


def _window(window: dict[str, Any] | None) -> str:
    if window is None:
        return "-"
    slide = window.get("slide")
    return f"{window['size']}" + (f", every {slide}" if slide else "")


@app.command()
def show(
    rule_id: RuleIdArg, api_url: ApiUrl = None, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """A rule in force: as written, its version and the devices it judges."""
    rule = Api(api_url, api_key).call("GET", f"/rules/{rule_id}").json()
    if as_json:
        print_json(rule)
        return
    written = RuleSpec.model_validate({k: rule[k] for k in RuleSpec.model_fields})
    console.print(
        yaml.safe_dump(written.model_dump(mode="json"), sort_keys=False).rstrip(), highlight=False
    )
    devices = "every device" if rule["devices"] is None else ", ".join(rule["devices"]) or "none"
    console.print(
        f"# version {rule['version']}, by {rule['updated_by']} at {rule['updated_ms']}; "
        f"judges: {devices}",
        highlight=False,
    )


def read_rules(path: Path) -> list[RuleSpec]:
    """The rules of a YAML or JSON file: one rule, or a list of them."""
    try:
        loaded = yaml.safe_load(path.read_text())
    except OSError as exc:
        fail(f"cannot read {path}: {exc}")
    except yaml.YAMLError as exc:
        fail(f"{path} is not YAML or JSON: {' '.join(str(exc).split())}")
    items = loaded if isinstance(loaded, list) else [loaded]
    rules: list[RuleSpec] = []
    for i, item in enumerate(items):
        where = f"{path}" + (f" [{i}]" if isinstance(loaded, list) else "")
        if not isinstance(item, dict):
            fail(f"{where}: a rule is a mapping (id, name, when, …), not {type(item).__name__}")
        try:
            rules.append(RuleSpec.model_validate(item))
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in first["loc"]) or "rule"
            fail(f"{where} ({item.get('id', 'no id')}): {field}: {first['msg']}")
    ids = [r.id for r in rules]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        fail(f"{path}: a rule's id more than once ({', '.join(twice)})")
    if not rules:
        fail(f"{path} holds no rule")
    return rules


@app.command()
def apply(
    file: Annotated[Path, typer.Argument(help="a YAML or JSON file: one rule, or a list")],
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Create or replace each rule of the file (PUT /rules/{id}): every change is a new
    version, a rule as it stands is left alone. The file is checked whole before any rule is
    sent; a rule the API refuses is reported and the others are still applied (exit 1)."""
    rules = read_rules(file)
    api = Api(api_url, api_key)
    outcomes = [_apply(api, rule) for rule in rules]
    if as_json:
        print_json(outcomes)
    else:
        for o in outcomes:
            console.print(_outcome(o), highlight=False)
    failed = [o["id"] for o in outcomes if o["outcome"] == "failed"]
    if failed:
        fail(f"not applied: {', '.join(failed)}")


def _outcome(o: dict[str, Any]) -> str:
    if o["outcome"] != "failed":
        return f"{o['id']}: {o['outcome']} (version {o['version']})"
    stays = f"; version {o['version']} stays in force" if o["version"] is not None else ""
    return f"{o['id']}: failed: {o['error']}{stays}"


def _apply(api: Api, rule: RuleSpec) -> dict[str, Any]:
    path = f"/rules/{rule.id}"
    before = api.call("GET", path, ok=(200, 404))
    was = before.json()["version"] if before.status_code == 200 else None
    response = api.request("PUT", path, rule.model_dump(mode="json"))
    if response.status_code not in (200, 201):
        return {
            "id": rule.id,
            "outcome": "failed",
            "version": was,
            "error": f"{response.status_code} {problem(response)}",
        }
    version = response.json()["version"]
    outcome = "created" if was is None else "unchanged" if version == was else "changed"
    return {"id": rule.id, "outcome": outcome, "version": version, "error": None}


@app.command()
def delete(
    rule_id: RuleIdArg, api_url: ApiUrl = None, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """Delete a rule (its versions stay; the scorer drops it)."""
    Api(api_url, api_key).call("DELETE", f"/rules/{rule_id}", ok=(204,))
    if as_json:
        print_json({"id": rule_id, "deleted": True})
    else:
        console.print(f"deleted {rule_id}", highlight=False)


@app.command(name="test")
def try_rules(
    file: Annotated[Path, typer.Argument(help="a YAML or JSON file: one rule, or a list")],
    recording: Annotated[
        Path, typer.Option("--file", help="a recorded CSV (timestamp, device id, metrics)")
    ],
    lateness: Annotated[
        str | None,
        typer.Option(help="how late a reading may be (default: score.allowed_lateness)"),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """When the rules would have fired over a recorded file: the scorer's own projection and
    per-device step, locally, with no stack."""
    # deliberately lazy: Spark, pandas and the scorer's step load only for this command
    from fleetwatch.contracts.rules import duration_ms
    from fleetwatch.filemode.columns import FileModeError
    from fleetwatch.filemode.rules import judge_file
    from fleetwatch.streaming.rules.conditions import RuleError, local_rules_session

    rules = read_rules(file)
    settings = load_settings()
    try:
        late_ms = duration_ms(lateness or settings.score.allowed_lateness)
    except ValueError as exc:
        fail(f"--lateness: {exc}")
    spark = local_rules_session("fleetwatch-rules-test")
    try:
        result = judge_file(spark, rules, recording, late_ms)
    except RuleError as exc:
        fail(f"{exc.field}: {exc.message}")
    except FileModeError as exc:
        fail(str(exc))
    finally:
        spark.stop()
    events = [a.model_dump(mode="json") for a in result.alerts]
    if as_json:
        print_json({"rows": result.rows, "late": result.late, "events": events})
        return
    table = Table("event time", "device", "rule", "status", "value", "severity")
    for a in result.alerts:
        value = "" if a.value is None else f"{a.value:g}"
        at = datetime.fromtimestamp(a.event_ms / 1000, UTC)
        when = at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
        table.add_row(
            when, a.device_id, f"{a.rule_id} v{a.rule_version}", a.status, value, a.severity
        )
    console.print(table)
    opened = sum(a.status == "open" for a in result.alerts)
    console.print(
        f"{result.rows} rows, {opened} episodes opened, {result.late} readings late",
        highlight=False,
    )
