"""`fleetwatch`: one command, a subcommand per stage.

An expected failure — an error fleetwatch raises on purpose (:class:`FleetwatchError`) or a
connection that could not be made — ends a command with one line on stderr and exit code 1;
``--debug`` prints its traceback first."""

from __future__ import annotations

import socket
import sys
from importlib import metadata
from typing import Annotated, Any

import typer
from confluent_kafka import KafkaError, KafkaException
from typer._click import Context  # typer vendors click: the base of typer.Context
from typer.core import TyperGroup

from fleetwatch.cli import (
    api,
    demo,
    detect,
    devices,
    grafana,
    models,
    replay,
    rules,
    sim,
    stack,
    stages,
    topics,
)
from fleetwatch.cli.common import debugging, fail, show_tracebacks
from fleetwatch.contracts.errors import FleetwatchError

DISTRIBUTION = "fleetwatch"

_EXPECTED: tuple[type[BaseException], ...] = (
    FleetwatchError,
    ConnectionError,
    TimeoutError,
    socket.gaierror,
    KafkaException,
)


def _expected(exc: BaseException) -> bool:
    if isinstance(exc, _EXPECTED):
        return True
    # a database that cannot be reached; sqlalchemy is imported by the commands that use one
    sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")
    return sqlalchemy_exc is not None and isinstance(exc, sqlalchemy_exc.OperationalError)


def describe(exc: BaseException) -> str:
    """One line for an expected failure: the error's own message, and what failed to connect."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        text = f"Kafka: {exc.args[0].str()}"
    elif isinstance(exc, FleetwatchError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split()) or type(exc).__name__


class _Guarded(TyperGroup):
    """The top command: expected failures as one line (``--debug``: with the traceback)."""

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if not _expected(exc):
                raise
            hint = "" if debugging() else " (--debug shows the traceback)"
            fail(describe(exc) + hint)


app = typer.Typer(
    cls=_Guarded,
    help="fleetwatch: streaming anomaly detection for IoT device fleets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if not value:
        return
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    print(f"{DISTRIBUTION} {version}")
    raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="show the traceback of an expected failure")
    ] = False,
) -> None:
    """fleetwatch: streaming anomaly detection for IoT device fleets."""
    show_tracebacks(debug)


app.add_typer(stack.app, name="stack")
app.add_typer(sim.app, name="sim")
app.add_typer(models.app, name="models")
app.add_typer(replay.app, name="replay")
app.add_typer(api.app, name="api")
app.add_typer(devices.app, name="devices")
app.add_typer(rules.app, name="rules")
app.add_typer(topics.app, name="topics")
app.add_typer(grafana.app, name="grafana")
app.command()(stages.gateway)
app.command()(stages.score)
app.command()(stages.train)
app.command()(demo.demo)
app.command()(detect.detect)

if __name__ == "__main__":
    app()
