"""`fleetwatch devices add | list | revoke | rotate`: per-device MQTT credentials on the local
broker (:mod:`fleetwatch.stack.credentials`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console

from fleetwatch.cli.common import AsJson, fail, load_settings, print_json
from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.contracts.settings import Settings
from fleetwatch.stack.credentials import Credentials, Issued
from fleetwatch.stack.mosquitto import MosquittoBroker

app = typer.Typer(
    help="Per-device MQTT credentials of the local broker (its password file and ACL).",
    no_args_is_help=True,
)
console = Console()
DeviceArg = Annotated[str, typer.Argument(help="device id")]


@app.command()
def add(device_id: DeviceArg, as_json: AsJson = False) -> None:
    """Issue credentials to a device; prints its password once (it is kept only hashed)."""
    _issued(lambda c: c.add(device_id), as_json)


@app.command()
def rotate(device_id: DeviceArg, as_json: AsJson = False) -> None:
    """Give a device a new password; the old one stops working at its next connection."""
    _issued(lambda c: c.rotate(device_id), as_json)


@app.command()
def revoke(device_id: DeviceArg) -> None:
    """Remove a device's credentials; the broker refuses it from its next connection."""
    settings = load_settings()
    try:
        Credentials(settings).revoke(device_id)
    except FleetwatchError as exc:
        fail(str(exc))
    console.print(f"revoked {device_id}{_reloaded(settings)}")


@app.command(name="list")
def list_devices(as_json: AsJson = False) -> None:
    """Devices that have credentials, one per line (--json: an array of device ids)."""
    devices = list(Credentials(load_settings()).devices())
    if as_json:
        print_json(devices)
        return
    for device_id in devices:
        console.print(device_id, highlight=False)


def _issued(issue: Callable[[Credentials], Issued], as_json: bool) -> None:
    settings = load_settings()
    try:
        issued = issue(Credentials(settings))
    except FleetwatchError as exc:
        fail(str(exc))
    reloaded = _reloaded(settings)
    if as_json:
        print_json(asdict(issued))
        return
    console.print(
        f"device {issued.device_id}{reloaded}\n"
        f"  broker     {issued.host}:{issued.port}{_tls(issued)}\n"
        f"  username   {issued.device_id}\n"
        f"  password   {issued.password}  (shown once; `devices rotate` gives a new one)\n"
        f"  publish    {issued.telemetry_topic}, {issued.acks_topic}\n"
        f"  subscribe  {issued.commands_topic}",
        highlight=False,
    )


def _tls(issued: Issued) -> str:
    if not issued.tls:
        return ""
    return f"  (TLS; CA {issued.ca_file or 'the system trust store'})"


def _reloaded(settings: Settings) -> str:
    if MosquittoBroker(settings).reload():
        return " (the running broker has it now)"
    return " (the broker reads it when it starts)"
