"""`fleetwatch demo`: the whole pipeline on the local stack, with a simulated fleet."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Annotated

import typer
from confluent_kafka import Consumer
from rich.console import Console

from fleetwatch.cli.common import fail, load_settings
from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.contracts.settings import Settings
from fleetwatch.fleet.bootstrap import first_fleet_models
from fleetwatch.kafka_config import client_config
from fleetwatch.runtime import stop_event
from fleetwatch.simulator.scenario import Scenario
from fleetwatch.stack.credentials import Credentials
from fleetwatch.stack.manager import Stack
from fleetwatch.stack.processes import ManagedProcess, tail

console = Console(soft_wrap=True)  # one alert per line


def _stage_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "fleetwatch.cli.main", *args]


def demo(
    devices: Annotated[int, typer.Option(min=1, help="simulated devices")] = 5,
    rate: Annotated[float, typer.Option(min=0.1, help="readings per second per device")] = 2.0,
    spike_every: Annotated[
        int, typer.Option(min=1, help="every Nth fleet reading is a spike")
    ] = 37,  # prime, so spikes rotate across devices
) -> None:
    """Bring the stack up, run every stage and the simulator, print alerts until Ctrl-C.
    Exits 1, naming the stage and its last log line, when a stage dies on its own."""
    settings = load_settings()
    stop = stop_event()
    stack = Stack(settings)
    stack_was_up = all(c.pid for c in stack.status())
    prometheus_was_up = stack.prometheus.proc.running()
    try:
        seconds = stack.up(with_prometheus=True)
    except FleetwatchError as exc:
        fail(str(exc))
    console.print(
        f"[bold]stack[/] up in {seconds:.1f}s (Kafka {settings.kafka.bootstrap_servers}, "
        f"MQTT {settings.mqtt.host}:{settings.mqtt.port}, Prometheus {stack.prometheus.url})"
    )
    console.print(
        "dashboards: `fleetwatch grafana push --url GRAFANA_URL --token TOKEN "
        f"--prometheus-url {stack.prometheus.url}` publishes them to your Grafana"
    )
    logins: tuple[str, ...] = ()
    if not settings.mqtt.allow_anonymous:  # the fleet logs in as real devices do
        ids = [Scenario().device_id(i) for i in range(devices)]
        issued = Credentials(settings).issue_file(ids, settings.run_path / "mqtt" / "demo-devices")
        stack.reload_credentials()
        logins = ("--credentials", str(issued))
    stages = {
        "demo-gateway": _stage_argv("gateway"),
        "demo-score": _stage_argv("score"),
        "demo-api": _stage_argv("api", "--anonymous-read"),
        "demo-train": _stage_argv("train"),
        "demo-sim": _stage_argv(
            "sim",
            "run",
            "--devices",
            str(devices),
            "--rate",
            str(rate),
            "--spike-every",
            str(spike_every),
            "--truth",
            str(settings.run_path / "demo-truth.jsonl"),
            *logins,
        ),
    }
    procs = [ManagedProcess(name, settings.run_path) for name in stages]
    died: str | None = None
    modeller: threading.Thread | None = None
    try:
        for proc in procs:
            proc.stop()  # a previous demo that was killed hard
            proc.start(stages[proc.name])
            console.print(f"[bold]{proc.name[5:]}[/] started, log {proc.log_file}")
        console.print(
            f"API on http://{settings.api.host}:{settings.api.port}/alerts — "
            "alerts appear once Spark is up (about 20 s). Ctrl-C to stop."
        )
        console.print(
            "models: the trainer publishes each device's parameters on model.params; a fleet "
            f"model is registered and promoted once {min(devices, 3)} devices have learned. "
            f"MLflow UI: mlflow ui --backend-store-uri {settings.mlflow_tracking_uri}",
            highlight=False,
        )
        modeller = threading.Thread(
            target=_fleet_model,
            args=(settings, min(devices, 3), stop),
            name="demo-fleet-model",
            daemon=True,
        )
        modeller.start()
        died = _print_alerts(settings, procs, stop)
    finally:
        console.print("stopping…")
        stop.set()  # a demo ended by a dead stage ends its fleet-model thread too
        if modeller is not None:
            modeller.join(timeout=15)
        for proc in reversed(procs):
            proc.stop()
        if not stack_was_up:
            stack.down()
        elif not prometheus_was_up:
            stack.prometheus.proc.stop()
        console.print("demo stopped; everything it started is down.")
    if died is not None:
        console.print(f"[red]demo failed:[/] {died}", highlight=False)
        raise typer.Exit(1)


def _fleet_model(settings: Settings, min_devices: int, stop: threading.Event) -> None:
    try:
        for line in first_fleet_models(settings, min_devices, stop):
            console.print(f"[bold]model[/] {line}", highlight=False)
    except Exception as exc:  # noqa: BLE001 - the demo goes on without a fleet model
        console.print(f"[yellow]no fleet model:[/] {exc}", highlight=False)


def _print_alerts(settings: Settings, procs: list[ManagedProcess], stop: object) -> str | None:
    """Print alerts until ``stop``; a stage (the simulator included) that exits on its own ends
    it: the stage, its last log line and its log, or ``None`` when stopped."""
    consumer = Consumer(
        client_config(
            settings.kafka,
            {
                "group.id": f"fleetwatch-demo-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "latest",
                "enable.auto.commit": False,
            },
        )
    )
    consumer.subscribe([settings.topics.alerts])
    try:
        while not stop.is_set():  # type: ignore[attr-defined]
            for proc in procs:
                if not proc.running():
                    last = next((ln for ln in reversed(tail(proc.log_file)) if ln.strip()), "")
                    console.print(f"[red]{proc.name[5:]} exited[/]; see {proc.log_file}")
                    return (
                        f"{proc.name[5:]} exited ({last.strip() or 'no output'}); "
                        f"log {proc.log_file}"
                    )
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            alert = json.loads(msg.value() or b"{}")
            when = datetime.fromtimestamp(alert.get("event_ms", 0) / 1000, tz=UTC).strftime(
                "%H:%M:%S"
            )
            lag = time.time() - alert.get("event_ms", 0) / 1000
            status = str(alert.get("status", "open")).upper()
            colour = "bold red" if status in ("OPEN", "UPDATE") else "green"
            why = alert.get("reason") if status in ("OPEN", "UPDATE") else alert.get("metric")
            console.print(
                f"[{colour}]{status:<8}[/] {when} {alert.get('device_id')} {why} "
                f"score={alert.get('score', 0):.2f} (after {lag:.1f}s)",
                highlight=False,
            )
    finally:
        consumer.close()
    return None
