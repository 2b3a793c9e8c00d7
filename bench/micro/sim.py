"""The simulator alone against the local Mosquitto: sustained readings/s at QoS 0 and QoS 1.

A fleet of DEVICES devices is asked for more readings per second than the target (paced in real
time, as `sim run` does); the achieved rate is measured over the steady part of the run (from
the first progress sample with readings sent to the last). The baseline is raw paho publishing
of pre-built payloads from one process (no generation, no pacing), the ceiling of one
connection. Peak RSS is this process plus the largest publisher process.

Then the cost of a QoS 1 publish at a paced 5,000/s (1,000 topics, a burst every 0.2 s, as the
end-to-end bench's fleet publishes): CPU µs per publish of the simulator's connection
(:class:`~fleetwatch.simulator.publisher.Links`) against paho's client as paho configures it
(1,000 in flight, each publish written as it is made), the baseline, in the same run.

    python bench/micro/sim.py   (BENCH_SIM_WORKERS=N: publisher processes, default 2)

Last line: {"qos0_rps", "qos1_rps", "devices", "peak_rss_mb", "baseline_qos0_rps", "workers",
"qos1_cpu_us_per_publish", "baseline_qos1_cpu_us_per_publish"}
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import write_results
from fleetwatch.contracts.settings import MqttSettings, Settings
from fleetwatch.mqtt_config import configure
from fleetwatch.simulator.publisher import Links
from fleetwatch.simulator.runner import Totals, run
from fleetwatch.simulator.scenario import Scenario
from fleetwatch.stack.credentials import login

DEVICES = 10_000
RATE = 6.0  # per device: 60,000 readings/s asked for
SECONDS = 12.0
WORKERS = int(os.environ.get("BENCH_SIM_WORKERS", "2"))


def baseline(settings: MqttSettings, n: int = 200_000) -> float:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="", protocol=mqtt.MQTTv5)
    configure(client, settings)
    client.connect(settings.host, settings.port)
    payload = b'{"v":1,"seq":1,"ts":1763750000000,"sent":1763750000005,"metrics":{"t":21.345}}'
    topics = [f"bench-{uuid.uuid4().hex[:6]}/dev-{i:04d}/telemetry" for i in range(1000)]
    started = time.perf_counter()
    for i in range(n):
        client.publish(topics[i % 1000], payload, qos=0)
    while client.want_write():
        client.loop_write()
    elapsed = time.perf_counter() - started
    client.disconnect()
    return n / elapsed


def simulated(settings: MqttSettings, qos: int) -> tuple[float, Totals]:
    root = f"bench{uuid.uuid4().hex[:6]}/devices"
    mqtt_settings = settings.model_copy(update={"root": root})
    scenario = Scenario(
        devices=DEVICES, rate=RATE, duration_s=SECONDS, qos=qos, workers=WORKERS, seed=1
    ).with_overrides(kinds={"temperature": 1, "vibration": 1, "power": 1, "battery": 1})
    samples: list[tuple[float, int]] = []

    def progress(t: Totals) -> None:
        samples.append((time.monotonic(), t.sent))

    totals = run(scenario, mqtt_settings, threading.Event(), progress=progress)
    steady = [(t, s) for t, s in samples if s > 0]
    # the last samples include the final drain; use the window where the count still grows
    while len(steady) > 2 and steady[-1][1] == steady[-2][1]:
        steady.pop()
    rps = (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0])
    return rps, totals


PACED_RATE, PACED_N = 5000, 50_000
PAYLOAD = b'{"v":1,"seq":1,"ts":1763750000000,"metrics":{"t":21.3}}'


class _PahoLinks:
    """The baseline: one paho client as paho configures it, driven like :class:`Links`."""

    def __init__(self, settings: MqttSettings) -> None:
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
        self.client.max_inflight_messages_set(1000)
        self.acked = 0
        self.client.on_publish = lambda *_: setattr(self, "acked", self.acked + 1)
        configure(self.client, settings)
        self.client.connect(settings.host, settings.port)

    def publish_all(self, messages: list[tuple[str, bytes]], qos: int) -> None:
        for topic, payload in messages:
            self.client.publish(topic, payload, qos=qos)

    def service(self, timeout_s: float) -> None:
        self.client.loop(timeout=timeout_s)

    def drain(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while self.acked < PACED_N and time.monotonic() < deadline:
            self.client.loop(timeout=0.05)
        return PACED_N - self.acked

    def close(self) -> None:
        self.client.disconnect()


def paced_cost(links: Any, topics: list[str]) -> float:
    """CPU µs per QoS 1 publish at PACED_RATE, every publish acknowledged."""
    burst = [(t, PAYLOAD) for t in topics]
    started, cpu0, sent = time.monotonic(), time.process_time(), 0
    while sent < PACED_N:
        links.publish_all(burst, 1)
        sent += len(burst)
        due = started + sent / PACED_RATE
        while time.monotonic() < due:
            links.service(max(0.0, min(0.05, due - time.monotonic())))
    unacked = links.drain(30.0)
    cpu = time.process_time() - cpu0
    links.close()
    if unacked:
        raise SystemExit(f"{unacked} QoS 1 publishes not acknowledged")
    return cpu / PACED_N * 1e6


def main() -> None:
    settings = login(Settings(), "sim")
    base = baseline(settings)
    print(f"baseline: raw paho publish of pre-built payloads, one process: {base:,.0f} msg/s")
    qos0, t0 = simulated(settings, 0)
    print(f"sim QoS 0: {qos0:,.0f} readings/s sustained ({t0.sent:,} sent, {t0.errors} errors)")
    qos1, t1 = simulated(settings, 1)
    print(
        f"sim QoS 1: {qos1:,.0f} readings/s sustained ({t1.sent:,} sent, {t1.acked:,} acked, "
        f"{t1.errors} errors, {t1.unacked} unacked)"
    )
    root = f"bench{uuid.uuid4().hex[:6]}/devices"
    ids = [f"dev-{i:04d}" for i in range(1000)]
    topics = [f"{root}/{d}/telemetry" for d in ids]
    paced = settings.model_copy(update={"root": root})
    ours = paced_cost(Links(paced, f"bench-{root}", ids, lambda _t, _p: None), topics)
    paho = paced_cost(_PahoLinks(settings), topics)
    print(
        f"QoS 1 at {PACED_RATE:,}/s: {ours:.1f} CPU µs per publish "
        f"(baseline, paho's client as configured by paho: {paho:.1f})"
    )
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"asked for {DEVICES * RATE:,.0f} readings/s from {DEVICES} devices, {WORKERS} workers")
    figures = {
        "qos0_rps": round(qos0),
        "qos1_rps": round(qos1),
        "devices": DEVICES,
        "peak_rss_mb": round(own + child, 1),
        "baseline_qos0_rps": round(base),
        "workers": WORKERS,
        "qos1_cpu_us_per_publish": round(ours, 1),
        "baseline_qos1_cpu_us_per_publish": round(paho, 1),
    }
    print(json.dumps(figures))
    sys.stdout.flush()
    write_results(__file__, figures)


if __name__ == "__main__":
    main()
