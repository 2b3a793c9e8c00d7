"""`fleetwatch topics create`: every topic, with its config, on a cluster of one's own (the
compose file's and the Kubernetes manifests' one-shot job runs it)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from fleetwatch.cli.common import fail, load_settings
from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.contracts.topics import TopicSpec, topic_specs
from fleetwatch.stack.topics import TopicsReport, create_on_cluster

app = typer.Typer(help="Kafka topics on an existing cluster.", no_args_is_help=True)
console = Console(soft_wrap=True)


@app.command()
def create(
    bootstrap: Annotated[
        str | None,
        typer.Option(help="Kafka bootstrap servers (default: settings kafka.bootstrap_servers)"),
    ] = None,
    partitions: Annotated[
        int | None,
        typer.Option(min=1, help="partitions of each topic created (default: kafka.partitions)"),
    ] = None,
    replication_factor: Annotated[
        int | None,
        typer.Option(
            min=1, help="replicas of each topic created (default: kafka.replication_factor)"
        ),
    ] = None,
) -> None:
    """Create every topic fleetwatch uses that is missing, with its config (the compacted
    tables, the logs' retention). Existing topics are left as they are and reported, with how
    they differ from what would have been created; a second run changes nothing."""
    settings = load_settings()
    kafka = settings.kafka
    if bootstrap:
        kafka = kafka.model_copy(update={"bootstrap_servers": bootstrap})
    servers = kafka.bootstrap_servers
    specs = topic_specs(settings.topics)
    wanted_partitions = partitions or settings.kafka.partitions
    wanted_replicas = replication_factor or settings.kafka.replication_factor
    try:
        report = create_on_cluster(kafka, specs, wanted_partitions, wanted_replicas, inspect=True)
    except FleetwatchError as exc:
        fail(f"{exc} (bootstrap {servers})")
    _print(report, specs, wanted_partitions, wanted_replicas)
    console.print(
        f"{len(report.created)} created, {len(report.existing)} already there, on {servers}",
        highlight=False,
    )


def _print(report: TopicsReport, specs: list[TopicSpec], partitions: int, replicas: int) -> None:
    table = Table("topic", "state", "partitions", "replicas", "config / differences")
    by_name = {s.name: s for s in specs}
    for name in report.created:
        config = " ".join(f"{k}={v}" for k, v in by_name[name].config.items())
        table.add_row(name, "[green]created[/]", str(partitions), str(replicas), config)
    for topic in report.existing:
        state = "[yellow]exists, differs[/]" if topic.differences else "exists"
        table.add_row(
            topic.name,
            state,
            str(topic.partitions),
            str(topic.replication_factor),
            "; ".join(topic.differences),
        )
    console.print(table)
