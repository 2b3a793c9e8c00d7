"""`fleetwatch topics create`: every topic, with its config, on a cluster of one's own (the
compose file's and the Kubernetes manifests' one-shot job runs it); `fleetwatch topics acls`:
each stage's account its rights there."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from fleetwatch.cli.common import AsJson, fail, load_settings, print_json
from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.topics import TopicSpec, topic_specs
from fleetwatch.stack.acls import STAGES, apply_acls, bindings, grants
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
    with_acls: Annotated[
        bool, typer.Option("--acls", help="then each stage's ACLs (see `topics acls`)")
    ] = False,
    as_json: AsJson = False,
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
    granted = None
    if with_acls:
        granted = _grant(settings.model_copy(update={"kafka": kafka}), False, as_json)
    if as_json:
        document = _document(report, specs, wanted_partitions, wanted_replicas, servers)
        print_json(document if granted is None else {**document, "acls": granted})
        return
    _print(report, specs, wanted_partitions, wanted_replicas)
    console.print(
        f"{len(report.created)} created, {len(report.existing)} already there, on {servers}",
        highlight=False,
    )
    if granted is not None:
        console.print(f"{len(granted)} ACLs in place on {servers}")


def _document(
    report: TopicsReport, specs: list[TopicSpec], partitions: int, replicas: int, servers: str
) -> dict[str, object]:
    by_name = {s.name: s for s in specs}
    created = [
        {"topic": n, "partitions": partitions, "replicas": replicas, "config": by_name[n].config}
        for n in report.created
    ]
    existing = [
        {
            "topic": t.name,
            "partitions": t.partitions,
            "replicas": t.replication_factor,
            "differences": t.differences,
        }
        for t in report.existing
    ]
    return {"bootstrap": servers, "created": created, "existing": existing}


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


@app.command()
def acls(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the ACLs, create nothing")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Give each stage's account (kafka.logins, and kafka.sasl_username for the stages without
    one) exactly its stage's rights on the topics and consumer groups, as ACLs (kept when there
    already). Logs in with kafka.sasl_username, which needs ALTER on the cluster (or to be a
    super user, as the deployments' broker account is); when every stage has an account of
    its own, it gets no rights here."""
    settings = load_settings()
    granted = _grant(settings, dry_run, as_json)
    servers = settings.kafka.bootstrap_servers
    if as_json:
        print_json({"bootstrap": servers, "applied": not dry_run, "acls": granted})
    elif not dry_run:
        console.print(f"{len(granted)} ACLs in place on {servers}")


def _grant(settings: Settings, dry_run: bool, quiet: bool) -> list[dict[str, str]]:
    """Each stage's ACLs (printed as a table unless ``quiet``), applied unless ``dry_run``."""
    if not settings.kafka.sasl:
        fail("ACLs name SASL accounts: set kafka.security_protocol to SASL_SSL or SASL_PLAINTEXT")
    k = settings.kafka
    shared = any(stage not in k.logins for stage in STAGES)  # some stage logs in with it
    rows = [
        {
            "principal": principal,
            "resource": g.resource,
            "name": g.name + ("*" if g.prefixed else ""),
            "operation": g.operation,
        }
        for principal, granted in sorted(grants(settings, shared).items())
        for g in sorted(granted)
    ]
    if not quiet:
        table = Table("principal", "resource", "name", "operation")
        for row in rows:
            table.add_row(*row.values())
        console.print(table)
    if not dry_run:
        try:
            apply_acls(settings.kafka, bindings(settings, shared))
        except FleetwatchError as exc:
            fail(f"{exc} (bootstrap {settings.kafka.bootstrap_servers})")
    return rows
