"""What every subcommand does first: read the settings (the only place env is read) and log."""

from __future__ import annotations

from typing import NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console

from fleetwatch.contracts.logs import configure_logging
from fleetwatch.contracts.settings import Settings

_err = Console(stderr=True, soft_wrap=True)  # an error stays on one line


def load_settings() -> Settings:
    try:
        settings = Settings()
    except ValidationError as exc:
        fail(f"invalid settings: {exc.errors(include_url=False)[0]}")
    configure_logging(settings.log_level)
    return settings


def fail(message: str, code: int = 1) -> NoReturn:
    _err.print(f"[bold red]fleetwatch:[/] {message}", highlight=False)
    raise typer.Exit(code)
