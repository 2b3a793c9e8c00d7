"""Running a scenario against the broker: publisher loop(s), truth file, counters, stop.

One publisher runs in this process; with ``workers > 1`` each worker is a separate process with
its own MQTT connection(s) and a contiguous share of the devices. The parent owns the truth
file (workers send truth records over a queue) and sums the workers' counters.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import multiprocessing.sharedctypes
import queue
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.settings import MqttSettings
from fleetwatch.simulator.devices import command_for, obey
from fleetwatch.simulator.engine import Fleet, Tick
from fleetwatch.simulator.errors import SimulatorError
from fleetwatch.simulator.scenario import Scenario, scenario_to_dict

logger = logging.getLogger(__name__)

SLOTS = ("readings", "sent", "acked", "errors", "commands", "unacked")
DRAIN_S = 30.0
TICK_S = 0.05
STEP_S = 0.005
"""Readings that fall due within this long of each other go out in one step: per step the
fleet's arrays cost the same whatever is due, so at thousands of readings a second a step per
due reading would spend the publisher's CPU on steps. A reading goes out at most this late (its
``sent`` says when it did)."""


class StopFlag(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Totals:
    readings: int
    sent: int
    acked: int
    errors: int
    commands: int
    unacked: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        return self.sent / self.elapsed_s if self.elapsed_s > 0 else 0.0


class Counters:
    """Per-worker counters in shared memory (readable by the parent while workers run)."""

    def __init__(self, workers: int) -> None:
        ctx = mp.get_context("spawn")
        self.array: multiprocessing.sharedctypes.SynchronizedArray[int] = ctx.Array(
            "q", workers * len(SLOTS)
        )
        self.started = time.monotonic()

    def set(self, worker: int, values: dict[str, int]) -> None:
        base = worker * len(SLOTS)
        for i, name in enumerate(SLOTS):
            self.array[base + i] = values[name]

    def totals(self) -> Totals:
        raw: list[int] = self.array[:]
        sums = {name: sum(raw[i :: len(SLOTS)]) for i, name in enumerate(SLOTS)}
        return Totals(
            readings=sums["readings"],
            sent=sums["sent"],
            acked=sums["acked"],
            errors=sums["errors"],
            commands=sums["commands"],
            unacked=sums["unacked"],
            elapsed_s=time.monotonic() - self.started,
        )


class TruthWriter:
    """The truth file (JSON lines, appended and flushed record by record) and its run sidecar."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.file = path.open("a")

    def write(self, records: list[dict[str, Any]]) -> None:
        if self.file is not None and records:
            self.file.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
            self.file.flush()

    def close(self, scenario: Scenario, start_ms: int, end_ms: int) -> None:
        if self.file is None or self.path is None:
            return
        self.file.close()
        run = {"scenario": scenario_to_dict(scenario), "start_ms": start_ms, "end_ms": end_ms}
        run_path(self.path).write_text(json.dumps(run) + "\n")


def run_path(truth: Path) -> Path:
    """The sidecar that says which fleet ran for how long (for false alerts per device-day)."""
    return truth.with_name(truth.name + ".run.json")


def shares(devices: int, workers: int) -> list[range]:
    step, extra = divmod(devices, workers)
    out, start = [], 0
    for w in range(workers):
        size = step + (1 if w < extra else 0)
        out.append(range(start, start + size))
        start += size
    return [r for r in out if len(r)]


def publish_loop(
    scenario: Scenario,
    devices: range,
    mqtt_settings: MqttSettings,
    stop: StopFlag,
    start_ms: int,
    emit_truth: Callable[[list[dict[str, Any]]], None],
    report: Callable[[dict[str, int]], None],
    credentials: dict[str, str] | None = None,
    client_id: str = "fleetwatch-sim",
) -> None:
    """Publish a share of the fleet in real time until it finishes or ``stop`` is set."""
    fleet = Fleet(scenario, devices, start_ms, mqtt_settings.telemetry_topic)
    inbox: list[tuple[str, bytes]] = []
    links = _links(mqtt_settings, client_id, fleet, inbox, credentials, scenario.qos > 0)
    qos = scenario.qos
    stats = dict.fromkeys(SLOTS, 0)
    last_report = 0.0

    def publish(tick: Tick) -> None:
        links.publish_all(tick.messages, qos)
        stats["readings"] += tick.readings
        stats["sent"] += len(tick.messages)
        emit_truth(tick.truth)

    last_step = -STEP_S
    try:
        while not stop.is_set() and not fleet.finished:
            if time.monotonic() - last_step >= STEP_S:
                last_step = time.monotonic()
                publish(fleet.step(now_ms()))
            if inbox:
                publish(_obey_inbox(fleet, links, inbox, mqtt_settings, stats))
            if time.monotonic() - last_report > 0.25:
                stats["acked"], stats["errors"] = links.totals()
                report(stats)
                last_report = time.monotonic()
            wait_s = (fleet.next_due_ms() - now_ms()) / 1000
            next_step_s = last_step + STEP_S - time.monotonic()
            links.service(max(0.0, min(max(wait_s, next_step_s), TICK_S)))
        publish(fleet.close(now_ms()))
        stats["unacked"] = links.drain(DRAIN_S) if qos else 0
        if stats["unacked"]:
            logger.warning("%d QoS 1 publishes were not acknowledged", stats["unacked"])
    finally:
        stats["acked"], stats["errors"] = links.totals()
        report(stats)
        links.close()


def _links(
    settings: MqttSettings,
    client_id: str,
    fleet: Fleet,
    inbox: list[tuple[str, bytes]],
    credentials: dict[str, str] | None,
    track_acks: bool,
) -> Any:
    from fleetwatch.simulator.publisher import Links  # lazy: paho only where MQTT is used

    def on_message(topic: str, payload: bytes) -> None:
        inbox.append((topic, payload))

    return Links(settings, client_id, fleet.ids, on_message, credentials, track_acks)


def _obey_inbox(
    fleet: Fleet,
    links: Any,
    inbox: list[tuple[str, bytes]],
    settings: MqttSettings,
    stats: dict[str, int],
) -> Tick:
    tick = Tick()
    acks: list[tuple[str, bytes]] = []
    for topic, payload in inbox:
        device_id = topic.rsplit("/", 2)[-2]
        command = command_for(fleet, device_id, payload)
        if command is None:
            continue
        ack = obey(fleet, command, now_ms(), tick)
        logger.info("device %s: %s -> %s %s", device_id, command.name, ack.status, ack.detail)
        acks.append((settings.acks_topic(device_id), ack.model_dump_json().encode()))
        stats["commands"] += 1
    inbox.clear()
    links.publish_all(acks, 1)
    return tick


def _worker(
    scenario: Scenario,
    devices: range,
    mqtt_settings: MqttSettings,
    stop: Any,
    start_ms: int,
    truth: Any,
    counters: Counters,
    worker: int,
    credentials: dict[str, str] | None,
    client_id: str,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent turns Ctrl-C into `stop`
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        publish_loop(
            scenario,
            devices,
            mqtt_settings,
            stop,
            start_ms,
            truth.put,
            lambda s: counters.set(worker, s),
            credentials,
            f"{client_id}-{worker}",
        )
    except SimulatorError as exc:
        truth.put({"error": str(exc)})
    finally:
        truth.put(None)


def run(
    scenario: Scenario,
    mqtt_settings: MqttSettings,
    stop: StopFlag,
    truth_path: Path | None = None,
    credentials: dict[str, str] | None = None,
    progress: Callable[[Totals], None] | None = None,
    client_id: str = "fleetwatch-sim",
) -> Totals:
    """Run ``scenario`` until it finishes or ``stop`` is set; the final counters."""
    parts = shares(scenario.devices, scenario.workers)
    counters = Counters(len(parts))
    writer = TruthWriter(truth_path)
    start_ms = now_ms()
    try:
        if len(parts) == 1:
            last = [0.0]

            def report(stats: dict[str, int]) -> None:
                counters.set(0, stats)
                if progress is not None and time.monotonic() - last[0] > 0.5:
                    progress(counters.totals())
                    last[0] = time.monotonic()

            publish_loop(
                scenario,
                parts[0],
                mqtt_settings,
                stop,
                start_ms,
                writer.write,
                report,
                credentials,
                client_id,
            )
        else:
            _run_workers(
                scenario,
                parts,
                mqtt_settings,
                stop,
                start_ms,
                writer,
                counters,
                credentials,
                client_id,
                progress,
            )
    finally:
        writer.close(scenario, start_ms, now_ms())
    return counters.totals()


def _run_workers(
    scenario: Scenario,
    parts: list[range],
    mqtt_settings: MqttSettings,
    stop: StopFlag,
    start_ms: int,
    writer: TruthWriter,
    counters: Counters,
    credentials: dict[str, str] | None,
    client_id: str,
    progress: Callable[[Totals], None] | None,
) -> None:
    ctx = mp.get_context("spawn")
    worker_stop = ctx.Event()
    truth: Any = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker,
            args=(
                scenario,
                part,
                mqtt_settings,
                worker_stop,
                start_ms,
                truth,
                counters,
                w,
                credentials,
                client_id,
            ),
            name=f"sim-publisher-{w}",
        )
        for w, part in enumerate(parts)
    ]
    for proc in procs:
        proc.start()
    running, errors = len(procs), []
    try:
        while running:
            if stop.is_set():
                worker_stop.set()
            try:
                item = truth.get(timeout=0.5)
            except queue.Empty:
                item = []
            if item is None:
                running -= 1
            elif isinstance(item, dict):
                errors.append(item["error"])
                worker_stop.set()
            else:
                writer.write(item)
            if progress is not None:
                progress(counters.totals())
    finally:
        worker_stop.set()
        for proc in procs:
            proc.join(timeout=DRAIN_S + 10)
            if proc.is_alive():
                logger.error("publisher %s did not stop; terminating it", proc.name)
                proc.terminate()
                proc.join()
    if errors:
        raise SimulatorError(errors[0])
