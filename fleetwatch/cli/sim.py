"""`fleetwatch sim`: run a simulated fleet, score alerts against its truth, record and replay."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live

from fleetwatch.cli.common import AsJson, fail, load_settings, print_json
from fleetwatch.contracts.clock import now_ms
from fleetwatch.runtime import stop_event
from fleetwatch.simulator import evaluate as ev
from fleetwatch.simulator.alert_source import read_alerts
from fleetwatch.simulator.errors import SimulatorError
from fleetwatch.simulator.publisher import Connection
from fleetwatch.simulator.recording import read_header
from fleetwatch.simulator.recording import record as record_run
from fleetwatch.simulator.recording import replay as replay_run
from fleetwatch.simulator.runner import Totals, TruthWriter, run_path
from fleetwatch.simulator.runner import run as run_fleet
from fleetwatch.simulator.scenario import Scenario, load_scenario
from fleetwatch.stack.credentials import login

app = typer.Typer(help="The device fleet simulator.", no_args_is_help=True)
console = Console(stderr=True)


def _progress_line(t: Totals, qos: int) -> str:
    acked = str(t.acked) if qos else "n/a (QoS 0)"
    return (
        f"sent {t.sent:,}  acked {acked}  errors {t.errors}  commands {t.commands}  "
        f"rate {t.rate:,.0f}/s  ({t.elapsed_s:.0f}s)"
    )


def read_credentials(path: Path) -> dict[str, str]:
    """``device_id:password`` per line (the plaintext file ``mosquitto_passwd -U`` hashes)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            user, _, password = line.partition(":")
            out[user.strip()] = password.strip()
    return out


def _scenario(
    scenario_file: Path | None,
    devices: int | None,
    rate: float | None,
    count: int | None,
    duration: float | None,
    seed: int | None,
    **overrides: Any,
) -> Scenario:
    """The scenario file's (or the default) scenario with the options given on the command line."""
    base = load_scenario(scenario_file) if scenario_file else Scenario()
    return base.with_overrides(
        devices=devices, rate=rate, count=count, duration_s=duration, seed=seed, **overrides
    )


@app.command()
def run(
    scenario_file: Annotated[
        Path | None, typer.Option("--scenario", help="TOML scenario; options override it")
    ] = None,
    devices: Annotated[int | None, typer.Option(min=1, help="number of devices")] = None,
    rate: Annotated[
        float | None, typer.Option(min=0.001, help="readings per second per device")
    ] = None,
    count: Annotated[
        int | None, typer.Option(min=1, help="readings per device (default: until Ctrl-C)")
    ] = None,
    duration: Annotated[float | None, typer.Option(min=0.001, help="seconds to run")] = None,
    seed: Annotated[int | None, typer.Option(help="the same seed gives the same run")] = None,
    qos: Annotated[int | None, typer.Option(min=0, max=1, help="MQTT QoS (default 1)")] = None,
    prefix: Annotated[str | None, typer.Option(help="device id prefix")] = None,
    kinds: Annotated[
        str | None, typer.Option(help="device kinds, comma separated (temperature, vibration…)")
    ] = None,
    anomalies_per_hour: Annotated[
        float | None, typer.Option(min=0, help="labelled anomalies per device-hour, all kinds")
    ] = None,
    spike_every: Annotated[
        int | None, typer.Option(min=0, help="every Nth fleet reading is a spike; 0: none")
    ] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="publisher processes")] = None,
    credentials: Annotated[
        Path | None, typer.Option(help="device_id:password lines; one connection per device")
    ] = None,
    truth: Annotated[
        Path | None, typer.Option(help="append the labelled truth here (JSON lines)")
    ] = None,
    quiet: Annotated[bool, typer.Option(help="no live progress display")] = False,
    as_json: AsJson = False,
) -> None:
    """Publish a simulated fleet to {root}/{device_id}/telemetry; devices obey their commands."""
    settings = load_settings()
    stop = stop_event()
    try:
        scenario = _scenario(
            scenario_file,
            devices,
            rate,
            count,
            duration,
            seed,
            qos=qos,
            prefix=prefix,
            workers=workers,
            kinds=dict.fromkeys(kinds.split(","), 1.0) if kinds else None,
            per_device_hour=anomalies_per_hour,
            spike_every=spike_every,
        )
        secrets = read_credentials(credentials) if credentials else None
    except (SimulatorError, OSError) as exc:
        fail(str(exc))
    mqtt = settings.mqtt if secrets else login(settings, "sim")
    live = Live(console=console, refresh_per_second=2, transient=True) if not quiet else None

    def progress(t: Totals) -> None:
        if live is not None:
            live.update(_progress_line(t, scenario.qos))

    client_id = f"fleetwatch-sim-{scenario.prefix}-{scenario.seed}"
    try:
        if live is not None:
            live.start()
        totals = run_fleet(scenario, mqtt, stop, truth, secrets, progress, client_id)
    except SimulatorError as exc:
        fail(str(exc))
    finally:
        if live is not None:
            live.stop()
    console.print(f"sim: {_progress_line(totals, scenario.qos)}", highlight=False)
    console.print(
        f"sim: sent {totals.sent} messages ({totals.readings} readings) "
        f"from {scenario.devices} devices",
        highlight=False,
    )
    if as_json:
        print_json({**dataclasses.asdict(totals), "devices": scenario.devices})
    if totals.unacked:
        fail(f"{totals.unacked} QoS 1 publishes were never acknowledged")


@app.command("eval")
def evaluate(
    truth: Annotated[Path, typer.Argument(help="truth JSON lines written by `sim run --truth`")],
    alerts: Annotated[
        Path | None, typer.Option(help="alerts as JSON lines (default: the alerts topic)")
    ] = None,
    tolerance: Annotated[
        float, typer.Option(min=0, help="seconds after an anomaly's end an alert still counts")
    ] = 30.0,
    device_days: Annotated[
        float | None,
        typer.Option(min=0, help="fleet size x run length (default: from the run sidecar)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
) -> None:
    """Precision, recall, F1 (overall and per kind), detection delay, false alerts/device-day."""
    settings = load_settings()
    try:
        records = ev.read_jsonl(truth)
        alert_records = ev.read_jsonl(alerts) if alerts is not None else read_alerts(settings)
        if device_days is None:
            sidecar = run_path(truth)
            if not sidecar.exists():
                fail(f"no {sidecar.name} next to the truth: give --device-days")
            device_days = ev.device_days_of(json.loads(sidecar.read_text()))
    except (OSError, ValueError, KeyError, SimulatorError) as exc:
        fail(f"cannot read the inputs: {exc}")
    report = ev.evaluate(
        ev.truth_events(records),
        ev.alert_events(alert_records),
        round(tolerance * 1000),
        device_days,
    )
    if as_json:
        print(json.dumps(report))
        return
    _print_report(report)


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.3f}{unit}"


def _print_report(report: dict[str, Any]) -> None:
    out = Console()
    out.print(
        f"anomalies {report['anomalies']}, alerts {report['alerts']}, "
        f"false alerts {report['false_alerts']} "
        f"({_fmt(report['false_alerts_per_device_day'])} per device-day)"
    )
    rows = [("overall", report), *report["by_kind"].items()]
    out.print(f"{'kind':<14}{'precision':>10}{'recall':>8}{'f1':>8}{'p50 delay':>11}{'p95':>9}")
    for name, r in rows:
        out.print(
            f"{name:<14}{_fmt(r['precision']):>10}{_fmt(r['recall']):>8}{_fmt(r['f1']):>8}"
            f"{_fmt(r['delay_p50_s'], 's'):>11}{_fmt(r['delay_p95_s'], 's'):>9}",
            highlight=False,
        )


@app.command()
def record(
    out: Annotated[Path, typer.Argument(help="the recording (JSON lines)")],
    scenario_file: Annotated[Path | None, typer.Option("--scenario")] = None,
    devices: Annotated[int | None, typer.Option(min=1)] = None,
    rate: Annotated[float | None, typer.Option(min=0.001)] = None,
    count: Annotated[int | None, typer.Option(min=1)] = None,
    duration: Annotated[float | None, typer.Option(min=0.001)] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    anomalies_per_hour: Annotated[float | None, typer.Option(min=0)] = None,
    as_json: AsJson = False,
) -> None:
    """Write a whole run (every payload and the truth) to a file, without a broker."""
    load_settings()
    try:
        scenario = _scenario(
            scenario_file, devices, rate, count, duration, seed, per_device_hour=anomalies_per_hour
        )
        messages, truths = record_run(scenario, out, now_ms())
    except (SimulatorError, OSError) as exc:
        fail(str(exc))
    console.print(f"sim: recorded {messages} messages and {truths} truth records to {out}")
    if as_json:
        print_json({"recording": str(out), "messages": messages, "truth_records": truths})


@app.command()
def replay(
    recording: Annotated[Path, typer.Argument(help="a file written by `sim record`")],
    speed: Annotated[
        float, typer.Option(min=0, help="1: original speed, 10: ten times faster, 0: unpaced")
    ] = 1.0,
    qos: Annotated[int, typer.Option(min=0, max=1)] = 1,
    truth: Annotated[Path | None, typer.Option(help="write the recording's truth here")] = None,
    as_json: AsJson = False,
) -> None:
    """Publish a recording again, exactly, at its original speed or faster."""
    settings = load_settings()
    stop = stop_event()
    try:
        scenario, start_ms = read_header(recording)
        mqtt = login(settings, "sim")
        conn = Connection(mqtt, f"fleetwatch-replay-{scenario.seed}", lambda t, p: None)
    except (SimulatorError, OSError, ValueError) as exc:
        fail(str(exc))
    writer = TruthWriter(truth)
    sent = [0]

    def publish(device_id: str, payload: bytes) -> None:
        conn.publish(settings.mqtt.telemetry_topic(device_id), payload, qos)
        sent[0] += 1
        if sent[0] % 500 == 0:
            conn.service(0.0)

    def wait(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not stop.is_set():
            conn.service(min(left, 0.1))

    try:
        n = replay_run(recording, publish, lambda r: writer.write([r]), speed, stop.is_set, wait)
        deadline = time.monotonic() + 30
        while qos and conn.in_flight > 0 and time.monotonic() < deadline:
            conn.service(0.05)
    finally:
        conn.close()
        writer.close(scenario, start_ms, start_ms)
    console.print(f"sim: replayed {n} messages from {recording}")
    if as_json:
        print_json({"recording": str(recording), "messages": n})
