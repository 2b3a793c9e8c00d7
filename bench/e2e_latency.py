"""Whole-path latency: device event time → alert on Kafka → alert stored by the API, against
the baseline of the ingest hop alone (event time → reading on telemetry.raw), in one run.

Runs gateway, scorer and API as processes on the local stack (brought up if needed) with
topics of their own, publishes a paced fleet with periodic spikes, and reads both topics.

Last line: {"readings", "alerts", "ingest_ms": {p50,p95,max}, "alert_kafka_ms": {...},
"alert_api_ms": {...}, "devices", "rate_per_device"}
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
from confluent_kafka import Consumer

from fleetwatch.contracts.settings import Settings, TopicSettings
from fleetwatch.contracts.topics import topic_specs
from fleetwatch.simulator.runner import run as run_fleet
from fleetwatch.simulator.scenario import Scenario
from fleetwatch.stack.manager import Stack
from fleetwatch.stack.topics import delete_topics, ensure_topics
from fleetwatch.streaming.checkpoints import versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION

DEVICES, RATE, ROUNDS, SPIKE_EVERY, API_PORT = 10, 5.0, 300, 50, 18_765


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p95": float("nan"), "max": float("nan")}
    arr = np.asarray(values)
    return {
        k: round(float(v), 1)
        for k, v in zip(("p50", "p95", "max"), np.percentile(arr, [50, 95, 100]), strict=True)
    }


def drain(consumer: Consumer, sink: list[float], stop: threading.Event) -> None:
    while not stop.is_set():
        for msg in consumer.consume(500, timeout=0.2):
            if msg.error() is None:
                sink.append(now_ms() - json.loads(msg.value() or b"{}")["event_ms"])
    consumer.close()


def wait(probe, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(0.2)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below
    settings = Settings()
    stack = Stack(settings)
    was_up = all(c.pid for c in stack.status())
    stack.up()
    tag = uuid.uuid4().hex[:8]
    topics = TopicSettings(**{k: f"{v}.b{tag}" for k, v in TopicSettings().model_dump().items()})
    ensure_topics(settings.kafka.bootstrap_servers, topic_specs(topics), settings.kafka.partitions)
    run_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-"))
    env = dict(os.environ)
    env.update({f"FLEETWATCH_TOPICS__{k.upper()}": v for k, v in topics.model_dump().items()})
    env.update(
        {
            "FLEETWATCH_RUN_DIR": str(run_dir),
            "FLEETWATCH_MQTT__ROOT": f"b{tag}/devices",
            "FLEETWATCH_API__PORT": str(API_PORT),
            "FLEETWATCH_API__CONSUMER_GROUP": f"api-{tag}",
            "FLEETWATCH_GATEWAY__CLIENT_ID": f"gateway-{tag}",
            "FLEETWATCH_GATEWAY__SHARE_GROUP": f"share-{tag}",
        }
    )
    procs = [
        subprocess.Popen(
            # the API reads without a key on loopback (`--anonymous-read`), as in the demo
            [sys.executable, "-m", "fleetwatch.cli.main", stage]
            + (["--anonymous-read"] if stage == "api" else []),
            env=env,
            stdout=(run_dir / f"{stage}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        for stage in ("gateway", "score", "api")
    ]
    stop = threading.Event()
    ingest: list[float] = []
    alerts: list[float] = []
    drains = []
    for topic, sink in ((topics.telemetry_raw, ingest), (topics.alerts, alerts)):
        consumer = Consumer(
            {
                "bootstrap.servers": settings.kafka.bootstrap_servers,
                "group.id": f"bench-{tag}-{topic}",
                "auto.offset.reset": "earliest",
            }
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
        sim_settings = Settings(
            _env_file=None, mqtt=settings.mqtt.model_copy(update={"root": f"b{tag}/devices"})
        )
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
        delete_topics(settings.kafka.bootstrap_servers, topics.model_dump().values())
        if not was_up:
            stack.down()
    figures = {
        "readings": totals.sent,
        "alerts": len(alerts),
        "devices": DEVICES,
        "rate_per_device": RATE,
        "ingest_ms": percentiles(ingest),
        "alert_kafka_ms": percentiles(alerts),
        "alert_api_ms": percentiles(api_ms),
    }
    kept = len(api_ms)
    print(f"{totals.sent} readings, {spikes} spikes: {len(alerts)} alerts, {kept} in the API")
    print(f"ingest hop (baseline) ms {figures['ingest_ms']}")
    print(
        f"whole path ms: to Kafka {figures['alert_kafka_ms']}, to the API {figures['alert_api_ms']}"
    )
    print(json.dumps(figures))


def _api_ok() -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{API_PORT}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
