"""`fleetwatch models list | show | promote | rollback | publish`: fleet models in the MLflow
registry, and their champions on ``model.params`` for the scorer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from confluent_kafka import KafkaException
from rich.console import Console
from rich.table import Table

from fleetwatch.cli.common import AsJson, fail, load_settings, print_json
from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.fleet.publish import publish_champion, register_fleet_models

if TYPE_CHECKING:
    from fleetwatch.fleet.registry import AliasMove, ModelRegistry

app = typer.Typer(
    help="Fleet models in the MLflow registry: champion and challenger.", no_args_is_help=True
)
console = Console()

TrackingUri = Annotated[
    str | None,
    typer.Option(
        "--tracking-uri",
        help="an MLflow server or store URI (default: settings mlflow.tracking_uri, "
        "else the SQLite store in the run directory)",
    ),
]
Name = Annotated[str, typer.Argument(help="registered model name, e.g. fleetwatch-hvac")]
Publish = Annotated[
    bool,
    typer.Option(
        "--publish/--no-publish",
        help="put the new champion on model.params for the scorer (needs Kafka); "
        "--no-publish moves the alias only (`models publish` later)",
    ),
]


def _registry(tracking_uri: str | None) -> ModelRegistry:
    # lazy: mlflow takes a second to import, which no other subcommand should pay
    from fleetwatch.fleet.registry import ModelRegistry
    from fleetwatch.fleet.store import with_tracking_uri

    try:
        return ModelRegistry(with_tracking_uri(load_settings(), tracking_uri))
    except FleetwatchError as exc:
        fail(str(exc))


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@app.command("list")
def list_models(tracking_uri: TrackingUri = None, as_json: AsJson = False) -> None:
    """Registered fleet models, their versions and aliases (--json: an array of versions)."""
    registry = _registry(tracking_uri)
    try:
        versions = [v for name in registry.names() for v in registry.versions(name)]
    except FleetwatchError as exc:
        fail(str(exc))
    if as_json:
        print_json([asdict(v) for v in versions])
        return
    if not versions:
        console.print("no registered models")
        return
    table = Table()
    for column in ("model", "version", "aliases", "created", "devices", "run"):
        table.add_column(column, overflow="fold")
    for v in versions:
        table.add_row(
            v.name,
            str(v.version),
            ", ".join(v.aliases) or "-",
            _when(v.created_ms),
            v.tags.get("fleetwatch.devices", "-"),
            v.run_id or "-",
        )
    console.print(table)


@app.command()
def show(
    name: Name,
    version: Annotated[int | None, typer.Option(min=1, help="version number")] = None,
    alias: Annotated[str | None, typer.Option(help="e.g. champion, challenger")] = None,
    tracking_uri: TrackingUri = None,
    as_json: AsJson = False,
) -> None:
    """One version (default: the champion, else the newest): details, metrics, its run
    (--json: the version's fields and ``run``, null when it has none)."""
    if version is not None and alias is not None:
        fail("give --version or --alias, not both")
    registry = _registry(tracking_uri)
    try:
        info = registry.version(name, version, alias)
        run = registry.run(info.run_id) if info.run_id else None
    except FleetwatchError as exc:
        fail(str(exc))
    if as_json:
        print_json(asdict(info) | {"run": asdict(run) if run is not None else None})
        return
    table = Table(show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    table.add_row("model", info.name)
    table.add_row("version", str(info.version))
    table.add_row("aliases", ", ".join(info.aliases) or "-")
    table.add_row("created", _when(info.created_ms))
    table.add_row("description", info.description or "-")
    table.add_row("source", info.source)
    for key, value in sorted(info.tags.items()):
        table.add_row(f"tag {key}", value)
    if run is not None:
        table.add_row("run", f"{run.name or '-'} ({run.run_id}, {run.status})")
        for key, value in sorted(run.params.items()):
            table.add_row(f"param {key}", value)
        for key, number in sorted(run.metrics.items()):
            table.add_row(f"metric {key}", f"{number:.6g}")
    console.print(table)


@app.command()
def promote(
    name: Name,
    version: Annotated[
        int | None, typer.Option(min=1, help="version to promote (default: the challenger)")
    ] = None,
    tracking_uri: TrackingUri = None,
    publish: Publish = True,
) -> None:
    """Make a version the champion; the champion it replaces becomes previous-champion."""
    registry = _registry(tracking_uri)
    _move(registry, lambda: registry.promote(name, version), name, tracking_uri, publish)


@app.command()
def rollback(name: Name, tracking_uri: TrackingUri = None, publish: Publish = True) -> None:
    """Move the champion back to the previous champion."""
    registry = _registry(tracking_uri)
    _move(registry, lambda: registry.rollback(name), name, tracking_uri, publish)


def _move(
    registry: ModelRegistry,
    move: Callable[[], AliasMove],
    name: str,
    tracking_uri: str | None,
    publish: bool,
) -> None:
    """Move an alias of ``name``, show the move, and tell the scorer when ``publish``."""
    try:
        moved = move()
    except FleetwatchError as exc:
        fail(str(exc))
    _print_move(moved)
    if publish:
        _publish(registry, name, tracking_uri)


@app.command()
def publish(name: Name, tracking_uri: TrackingUri = None) -> None:
    """Put the champion's parameters on model.params again (the scorer follows what is there;
    promote and rollback do this themselves; use it after moving the alias in MLflow directly)."""
    _publish(_registry(tracking_uri), name, tracking_uri)


@app.command("register-fleet")
def register_fleet(tracking_uri: TrackingUri = None, as_json: AsJson = False) -> None:
    """Pool the devices' learned parameters from model.params into one fleet model per
    scope (metric set: the members' tails, and the PCA moments of devices of two metrics or
    more) and register each as a new challenger version (--json: an object, scope → the
    version registered)."""
    # lazy: mlflow takes a second to import
    from fleetwatch.fleet.store import with_tracking_uri

    try:
        registered = register_fleet_models(with_tracking_uri(load_settings(), tracking_uri))
    except (FleetwatchError, TimeoutError) as exc:
        fail(str(exc))
    if not registered:
        fail("model.params has no device that has learned anything yet; run `fleetwatch train`")
    if as_json:
        print_json(registered)
        return
    for scope, version in registered.items():
        console.print(f"{scope}: registered version {version} as challenger")


def _publish(registry: ModelRegistry, name: str, tracking_uri: str | None) -> None:
    """The champion of ``name`` onto ``model.params`` under ``fleet:{scope}``."""
    # lazy: mlflow takes a second to import
    from fleetwatch.fleet.registry import CHAMPION, TAG_SCOPE
    from fleetwatch.fleet.store import with_tracking_uri

    try:
        scope = registry.version(name, alias=CHAMPION).tags.get(TAG_SCOPE)
    except FleetwatchError as exc:
        fail(str(exc))
    if not scope:
        fail(f"{name}: its champion has no {TAG_SCOPE} tag; cannot tell the scorer")
    try:
        published = publish_champion(with_tracking_uri(load_settings(), tracking_uri), scope)
    except (FleetwatchError, TimeoutError, KafkaException) as exc:
        fail(f"{name}: the scorer was not told of its champion: {exc}; `models publish` retries")
    if published is None:
        fail(f"{name} has no champion to publish")
    console.print(f"{name}: version {published[1]} published as fleet:{scope} on model.params")


def _print_move(move: AliasMove) -> None:
    was = f"was {move.replaced}" if move.replaced is not None else "there was none"
    console.print(f"{move.name}: champion is version {move.champion} ({was})", highlight=False)
