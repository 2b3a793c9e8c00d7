"""`fleetwatch stack up | down | status | logs`."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from fleetwatch.cli.common import AsJson, fail, load_settings, print_json
from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.stack.manager import ComponentStatus, Stack
from fleetwatch.stack.processes import tail

app = typer.Typer(
    help="The local Kafka (KRaft) and Mosquitto brokers, and Prometheus when asked for.",
    no_args_is_help=True,
)
console = Console()


@app.command()
def up(
    with_prometheus: Annotated[
        bool,
        typer.Option(
            "--with-prometheus",
            help="also run Prometheus (Debian's), scraping every stage and the broker",
        ),
    ] = False,
) -> None:
    """Start both brokers in the background, wait until healthy, create the topics."""
    stack = Stack(load_settings())
    try:
        seconds = stack.up(with_prometheus=with_prometheus)
    except FleetwatchError as exc:
        fail(str(exc))
    console.print(f"stack up in {seconds:.1f}s")
    _print_status(stack.status())


@app.command()
def down() -> None:
    """Stop what `stack up` started (by pid); nothing else is touched."""
    stopped = Stack(load_settings()).down()
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@app.command()
def status(as_json: AsJson = False) -> None:
    """Show whether each broker (and Prometheus, once started) runs, where, and its log; exit
    3 unless all run (--json: an array, a component each, ``pid`` null when stopped)."""
    stack = Stack(load_settings())
    components = stack.status()
    if as_json:
        print_json([asdict(c) | {"running": c.pid is not None} for c in components])
    else:
        _print_status(components)
    if not all(c.pid for c in components):
        raise typer.Exit(3)


@app.command()
def logs(
    component: Annotated[str, typer.Argument(help="kafka, mosquitto or prometheus")] = "kafka",
    lines: Annotated[int, typer.Option("-n", help="lines to show")] = 50,
    follow: Annotated[bool, typer.Option("-f", help="keep printing new lines")] = False,
) -> None:
    """Print the end of a broker's log."""
    stack = Stack(load_settings())
    procs = {p.name: p for p in stack.processes}
    if component not in procs:
        fail(f"unknown component {component!r}; choose one of {', '.join(procs)}")
    path = procs[component].log_file
    for line in tail(path, lines):
        console.print(line, markup=False, highlight=False)
    if follow:
        with path.open() as fh:
            fh.seek(0, 2)
            try:
                while True:
                    line = fh.readline()
                    if line:
                        console.print(line.rstrip("\n"), markup=False, highlight=False)
                    else:
                        time.sleep(0.2)
            except KeyboardInterrupt:
                pass


def _print_status(components: list[ComponentStatus]) -> None:
    table = Table("component", "state", "pid", "address", "log")
    for c in components:
        state = "[green]running[/]" if c.pid else "[red]stopped[/]"
        table.add_row(c.name, state, str(c.pid or "-"), c.address, c.log)
    console.print(table)
