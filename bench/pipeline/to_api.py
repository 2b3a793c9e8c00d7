"""Whole-path latency: device event time → alert on Kafka → alert stored by the API, against
the baseline of the ingest hop alone (event time → reading on telemetry.raw), in one run.

Runs gateway, scorer and API as processes on the local stack (brought up if needed) with
topics of their own, publishes a paced fleet with periodic spikes, and reads both topics.

    python bench/pipeline/to_api.py

Last line: {"readings", "alerts", "ingest_ms": {p50,p95,max}, "alert_kafka_ms": {...},
"alert_api_ms": {...}, "devices", "rate_per_device"}
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import httpx
from confluent_kafka import Consumer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import isolated_env, percentiles, stage, wait, write_results
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import client_config
from fleetwatch.simulator.runner import run as run_fleet
from fleetwatch.simulator.scenario import Scenario
from fleetwatch.stack.credentials import login
from fleetwatch.stack.manager import Stack
from fleetwatch.stack.topics import delete_topics
from fleetwatch.streaming.checkpoints import versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION

DEVICES, RATE, ROUNDS, SPIKE_EVERY, API_PORT = 10, 5.0, 300, 50, 18_765


def drain(consumer: Consumer, sink: list[float], stop: threading.Event) -> None:
    while not stop.is_set():
        for msg in consumer.consume(500, timeout=0.2):
            if msg.error() is None:
                sink.append(now_ms() - json.loads(msg.value() or b"{}")["event_ms"])
    consumer.close()


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below
    settings = Settings()
    stack = Stack(settings)
    was_up = all(c.pid for c in stack.status())
    stack.up()
    tag = uuid.uuid4().hex[:8]
    run_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-"))
    topics, env = isolated_env(settings, tag, run_dir)
    env["FLEETWATCH_API__PORT"] = str(API_PORT)
    env["FLEETWATCH_API__CONSUMER_GROUP"] = f"api-{tag}"
    procs = [
        stage(env, run_dir, "gateway", "gateway"),
        stage(env, run_dir, "score", "score"),
        # the API reads without a key on loopback (`--anonymous-read`), as in the demo
        stage(env, run_dir, "api", "api", "--anonymous-read"),
    ]
    stop = threading.Event()
    ingest: list[float] = []
    alerts: list[float] = []
    drains = []
    for topic, sink in ((topics.telemetry_raw, ingest), (topics.alerts, alerts)):
        consumer = Consumer(
            client_config(
                settings.kafka,
                {
                    "group.id": f"bench-{tag}-{topic}",
                    "auto.offset.reset": "earliest",
                },
            )
        )
        consumer.subscribe([topic])
        drains.append(threading.Thread(target=drain, args=(consumer, sink, stop)))
        drains[-1].start()
    try:
        wait(
            lambda: (
                versioned(run_dir / "checkpoints", "score", PLAN_VERSION) / "metadata"
            ).exists(),
            120,
            "the scorer",
        )
        wait(lambda: _api_ok(), 60, "the API")
        sim = login(settings, "sim").model_copy(update={"root": f"b{tag}/devices"})
        sim_settings = Settings(_env_file=None, mqtt=sim)
        scenario = Scenario(
            devices=DEVICES, rate=RATE, count=ROUNDS, seed=7, qos=1, prefix=f"b{tag}"
        ).with_overrides(spike_every=SPIKE_EVERY)
        truth = run_dir / "truth.jsonl"
        totals = run_fleet(scenario, sim_settings.mqtt, threading.Event(), truth)
        spikes = len(truth.read_text().splitlines())
        wait(lambda: len(ingest) >= totals.sent and len(alerts) >= spikes, 120, "every alert")
        stored = httpx.get(f"http://127.0.0.1:{API_PORT}/alerts", params={"limit": 1000}).json()[
            "data"
        ]
        api_ms = [a["stored_ms"] - a["event_ms"] for a in stored]
    finally:
        stop.set()
        for t in drains:
            t.join()
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
        delete_topics(settings.kafka, topics.model_dump().values())
        if not was_up:
            stack.down()
    figures = {
        "readings": totals.sent,
        "alerts": len(alerts),
        "devices": DEVICES,
        "rate_per_device": RATE,
        "ingest_ms": percentiles(ingest, 50, 95, 100),
        "alert_kafka_ms": percentiles(alerts, 50, 95, 100),
        "alert_api_ms": percentiles(api_ms, 50, 95, 100),
    }
    kept = len(api_ms)
    print(f"{totals.sent} readings, {spikes} spikes: {len(alerts)} alerts, {kept} in the API")
    print(f"ingest hop (baseline) ms {figures['ingest_ms']}")
    print(
        f"whole path ms: to Kafka {figures['alert_kafka_ms']}, to the API {figures['alert_api_ms']}"
    )
    print(json.dumps(figures))
    write_results(__file__, figures)


def _api_ok() -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{API_PORT}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
