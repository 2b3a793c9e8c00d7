"""`fleetwatch grafana build | push`: the dashboards as code, written to files or published."""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from fleetwatch.cli.common import AsJson, fail, load_settings, print_json
from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.observability import dashboards
from fleetwatch.observability.panels import PROMETHEUS_UID


class SslModeChoice(StrEnum):
    """Grafana's PostgreSQL TLS modes (``fleetwatch.observability.push.SslMode``)."""

    DISABLE = "disable"
    REQUIRE = "require"
    VERIFY_CA = "verify-ca"
    VERIFY_FULL = "verify-full"


app = typer.Typer(
    help="Grafana dashboards: build the JSON files, push them to a Grafana.", no_args_is_help=True
)
console = Console()


@app.command()
def build(
    out: Annotated[
        Path | None, typer.Option(help="directory (default: deploy/grafana/dashboards)")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="write nothing; exit 1 when a file differs")
    ] = False,
) -> None:
    """Write each dashboard's JSON model, as the code builds it."""
    directory = out or load_settings().home / "deploy" / "grafana" / "dashboards"
    if check:
        differ = dashboards.stale(directory)
        if differ:
            fail(f"out of date in {directory}: {', '.join(differ)}; run `fleetwatch grafana build`")
        console.print(f"dashboards in {directory} are up to date")
        return
    for path in dashboards.write(directory):
        console.print(f"wrote {path}")


@app.command()
def push(
    url: Annotated[str, typer.Option(help="Grafana's address, e.g. http://127.0.0.1:3000")],
    token: Annotated[
        str,
        typer.Option(
            envvar="GRAFANA_TOKEN",
            help="a service account token (Editor or Admin); or GRAFANA_TOKEN",
        ),
    ],
    prometheus_url: Annotated[
        str | None,
        typer.Option(
            help="Prometheus as Grafana reaches it: creates or updates the datasource "
            "`prometheus` (without it, that datasource is left as it is)"
        ),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            help="the API's PostgreSQL as Grafana reaches it: creates or updates the "
            "datasource `fleetwatch-db` (postgresql://reader:PASSWORD@host:5432/fleetwatch)"
        ),
    ] = None,
    database_sslmode: Annotated[
        SslModeChoice | None,
        typer.Option(
            help="TLS to that PostgreSQL (default: the URL's ?sslmode=, else require)",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Publish the dashboards (same uids, overwritten: a new version each push) in the folder
    `fleetwatch`; create or update the datasources given an address. Each dashboard picks its
    datasources in variables, so a Grafana whose own datasources have other uids works too."""
    # lazy: the Grafana client (niquests and its API) only for a push
    from grafana_client.api import GrafanaApi

    from fleetwatch.observability.push import push as publish

    try:
        report = publish(
            GrafanaApi.from_url(url, credential=token),
            dashboards.models(),
            prometheus_url,
            database_url,
            database_sslmode.value if database_sslmode else None,
        )
    except FleetwatchError as exc:
        fail(str(exc))
    if as_json:
        print_json(dataclasses.asdict(report))
        return
    for created in report.created:
        console.print(f"created {created}")
    for written in report.datasources:
        console.print(f"{written.action} datasource {written.uid} ({written.url})")
    for uid in report.provisioned:
        console.print(
            f"[yellow]datasource {uid!r} is provisioned from files in Grafana[/]: left as it is"
        )
    for published in report.dashboards:
        console.print(
            f"{published.title}: version {published.version} {url.rstrip('/')}{published.url}"
        )
    for missing in report.missing:
        option = "--prometheus-url" if missing == PROMETHEUS_UID else "--database-url"
        console.print(
            f"[yellow]no datasource {missing!r} in Grafana[/]: pick one in the dashboards' "
            f"datasource variable, or push again with {option}"
        )
