"""`fleetwatch grafana build | push`: the dashboards as code, written to files or published."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from fleetwatch.cli.common import fail, load_settings
from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.observability import dashboards

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
            help="Prometheus as Grafana reaches it, for a datasource `prometheus` if missing "
            "(default: the local stack's)"
        ),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            help="the API's PostgreSQL, as Grafana reaches it, for a datasource `fleetwatch-db` "
            "if missing (postgresql://reader:pw@host:5432/fleetwatch)"
        ),
    ] = None,
) -> None:
    """Publish the dashboards (same uids, overwritten: a new version each push) in the folder
    `fleetwatch`, and the datasources they use when Grafana lacks them."""
    # lazy: the Grafana client (httpx and its API) only for a push
    from grafana_client.api import GrafanaApi

    from fleetwatch.observability.push import push as publish

    settings = load_settings()
    try:
        report = publish(
            GrafanaApi.from_url(url, credential=token),
            dashboards.models(),
            prometheus_url or f"http://127.0.0.1:{settings.prometheus.port}",
            database_url,
        )
    except FleetwatchError as exc:
        fail(str(exc))
    for created in report.created:
        console.print(f"created {created}")
    for published in report.dashboards:
        console.print(
            f"{published.title}: version {published.version} {url.rstrip('/')}{published.url}"
        )
    for missing in report.missing:
        console.print(
            f"[yellow]no datasource {missing!r} in Grafana[/]: the Device dashboard and the "
            "fleet's device tables read the API's PostgreSQL; push again with --database-url"
        )
