"""`fleetwatch`: one command, a subcommand per stage."""

from __future__ import annotations

import typer

from fleetwatch.cli import (
    api,
    demo,
    detect,
    devices,
    grafana,
    models,
    replay,
    sim,
    stack,
    stages,
    topics,
)

app = typer.Typer(
    help="fleetwatch: streaming anomaly detection for IoT device fleets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(stack.app, name="stack")
app.add_typer(sim.app, name="sim")
app.add_typer(models.app, name="models")
app.add_typer(replay.app, name="replay")
app.add_typer(api.app, name="api")
app.add_typer(devices.app, name="devices")
app.add_typer(topics.app, name="topics")
app.add_typer(grafana.app, name="grafana")
app.command()(stages.gateway)
app.command()(stages.score)
app.command()(stages.train)
app.command()(demo.demo)
app.command()(detect.detect)

if __name__ == "__main__":
    app()
