"""What every subcommand does first: read the settings (the only place env is read) and log."""

from __future__ import annotations

import json
import sys
import traceback
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console

from fleetwatch.contracts.logs import configure_logging
from fleetwatch.contracts.settings import Settings

_err = Console(stderr=True, soft_wrap=True)  # an error stays on one line
AsJson = Annotated[bool, typer.Option("--json", help="one JSON document on stdout")]


def print_json(document: Any) -> None:
    """``--json``: ``document`` on stdout as one JSON document (and nothing else there)."""
    print(json.dumps(document))


_debug = False


def show_tracebacks(on: bool) -> None:
    """``fleetwatch --debug``: :func:`fail` prints the traceback of the exception being
    handled before its line."""
    global _debug
    _debug = on


def debugging() -> bool:
    return _debug


def load_settings() -> Settings:
    try:
        settings = Settings()
    except ValidationError as exc:
        fail(f"invalid settings: {exc.errors(include_url=False)[0]}")
    configure_logging(settings.log_level)
    return settings


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr and exit ``code``; with ``--debug``, called while an exception is
    handled, that exception's traceback first."""
    handled = sys.exc_info()[1]
    if _debug and handled is not None:
        traceback.print_exception(handled, file=sys.stderr)
    _err.print(f"[bold red]fleetwatch:[/] {message}", highlight=False)
    raise typer.Exit(code)
