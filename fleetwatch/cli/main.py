"""`fleetwatch`: one command, a subcommand per stage.

A subcommand's module is imported when the subcommand runs (or ``--help`` lists it), not at
start: a gateway worker or a `devices add` does not load pandas, scipy, the detectors and the
Spark jobs that `detect`, `models` and `replay` need.

An expected failure — an error fleetwatch raises on purpose (:class:`FleetwatchError`) or a
connection that could not be made — ends a command with one line on stderr and exit code 1;
``--debug`` prints its traceback first."""

from __future__ import annotations

import importlib
import socket
import sys
from importlib import metadata
from typing import Annotated, Any

import typer
from confluent_kafka import KafkaError, KafkaException
from typer._click import Command, Context  # typer vendors click: the base of typer's
from typer.core import TyperGroup

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


SUBCOMMANDS: dict[str, str] = {
    "stack": "fleetwatch.cli.stack:app",
    "sim": "fleetwatch.cli.sim:app",
    "models": "fleetwatch.cli.models:app",
    "replay": "fleetwatch.cli.replay:app",
    "api": "fleetwatch.cli.api:app",
    "devices": "fleetwatch.cli.devices:app",
    "rules": "fleetwatch.cli.rules:app",
    "topics": "fleetwatch.cli.topics:app",
    "grafana": "fleetwatch.cli.grafana:app",
    "gateway": "fleetwatch.cli.stages:gateway",
    "score": "fleetwatch.cli.stages:score",
    "train": "fleetwatch.cli.stages:train",
    "demo": "fleetwatch.cli.demo:demo",
    "detect": "fleetwatch.cli.detect:detect",
}
"""Each subcommand's name → ``module:attribute``: a Typer app of commands, or one command."""


def load_subcommand(name: str) -> Command:
    """The click command of subcommand ``name`` (:data:`SUBCOMMANDS`), its module imported."""
    module, attribute = SUBCOMMANDS[name].split(":")
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        command: Command = typer.main.get_group(target)
    else:
        single = typer.Typer()
        single.command(name=name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return command


class _Guarded(TyperGroup):
    """The top command: its subcommands loaded when asked for (:data:`SUBCOMMANDS`), and
    expected failures as one line (``--debug``: with the traceback)."""

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *SUBCOMMANDS]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name in SUBCOMMANDS:
            return load_subcommand(cmd_name)
        return super().get_command(ctx, cmd_name)

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


if __name__ == "__main__":
    app()
