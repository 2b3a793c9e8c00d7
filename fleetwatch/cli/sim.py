"""`fleetwatch sim run`: a simulated fleet publishing over MQTT."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from fleetwatch.cli.common import fail, load_settings
from fleetwatch.cli.signals import stop_event
from fleetwatch.simulator.fleet import FleetSpec, readings
from fleetwatch.simulator.publisher import SimulatorError, connect, open_truth, publish

app = typer.Typer(help="The device fleet simulator.", no_args_is_help=True)
console = Console(stderr=True)


@app.command()
def run(
    devices: Annotated[int, typer.Option(min=1, help="number of devices")] = 3,
    rate: Annotated[float, typer.Option(min=0.001, help="readings per second per device")] = 2.0,
    count: Annotated[
        int | None, typer.Option(min=1, help="readings per device (default: until Ctrl-C)")
    ] = None,
    seed: Annotated[int, typer.Option(help="random seed: the same seed gives the same run")] = 0,
    qos: Annotated[int, typer.Option(min=0, max=1, help="MQTT QoS")] = 1,
    prefix: Annotated[str, typer.Option(help="device id prefix")] = "sensor",
    spike_every: Annotated[
        int, typer.Option(min=0, help="every Nth fleet reading is a spike; 0: none")
    ] = 0,
    truth: Annotated[
        Path | None, typer.Option(help="append the injected anomalies here (JSON lines)")
    ] = None,
) -> None:
    """Publish readings of temperature sensors to {root}/{device_id}/telemetry."""
    settings = load_settings()
    stop = stop_event()
    spec = FleetSpec(devices=devices, prefix=prefix, seed=seed, spike_every=spike_every)
    interval_ms = max(1, round(1000 / rate))
    start_ms = time.time_ns() // 1_000_000
    try:
        client = connect(settings.mqtt, client_id=f"fleetwatch-sim-{prefix}-{seed}")
    except SimulatorError as exc:
        fail(str(exc))
    truth_file = open_truth(truth)
    try:
        stats = publish(
            client,
            settings.mqtt,
            readings(spec, start_ms, interval_ms, count),
            qos,
            interval_ms,
            stop,
            truth_file,
        )
    finally:
        client.disconnect()
        client.loop_stop()
        if truth_file is not None:
            truth_file.close()
    console.print(f"sim: sent {stats.sent} readings from {devices} devices, {stats.spikes} spikes")
