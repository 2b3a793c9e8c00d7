"""readings on telemetry.raw → `fleetwatch train` → model.params, on the real stack: the
parameters are what the models code computes on the same data, versions go up per device,
SIGTERM stops the trainer with exit 0, and a restart resumes without re-publishing a version."""

from __future__ import annotations

import json
import signal
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.telemetry import TelemetryRecord, encode
from fleetwatch.kafka_config import client_config
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.trainer.job import JOB, PLAN_VERSION
from fleetwatch.streaming.trainer.learning import learn_device
from tests.integration.conftest import Isolated, fleetwatch
from tests.mlflow_template import seed_store
from tests.polling import wait_until

DEVICES, PER_ROUND = 3, 30
MINUTE_MS = 60_000
# recent event times: the record timestamp is the event time, and older records would fall
# out of the topic's retention at once
START_MS = (time.time_ns() // 1_000_000 // MINUTE_MS - 6 * 60) * MINUTE_MS


def reading(device: str, seq: int) -> TelemetryRecord:
    rng = np.random.default_rng([seq, len(device)])
    event_ms = START_MS + seq * MINUTE_MS
    return TelemetryRecord(
        device_id=device,
        seq=seq,
        event_ms=event_ms,
        device_event_ms=event_ms,
        device_sent_ms=event_ms + 5,
        received_ms=event_ms + 10,
        metrics={"temperature": 21.0 + float(rng.normal(0, 0.3)), "humidity": 50.0},
    )


def produce(isolated: Isolated, records: list[TelemetryRecord]) -> None:
    producer = Producer(client_config(isolated.settings.kafka))
    for r in records:
        producer.produce(
            isolated.topics.telemetry_raw, encode(r), key=r.device_id, timestamp=r.event_ms
        )
    assert producer.flush(30) == 0


def long_form(records: list[TelemetryRecord]) -> pd.DataFrame:
    rows = [(r.event_ms, m, v) for r in records for m, v in r.metrics.items()]
    return pd.DataFrame(rows, columns=["event_ms", "metric", "value"])


def test_training_publishes_versioned_parameters_and_resumes_after_sigterm(
    isolated: Isolated, tmp_path: Path
) -> None:
    devices = [f"dev{isolated.tag}-{i}" for i in range(DEVICES)]
    env = {
        **isolated.env,
        "FLEETWATCH_TRAIN__TRIGGER_INTERVAL": "1 second",
        "FLEETWATCH_TRAIN__TRACKING": "false",
    }
    raw, params_topic = isolated.topics.telemetry_raw, isolated.topics.model_params
    checkpoint = versioned(tmp_path / "checkpoints", JOB, PLAN_VERSION)

    def rounds(k: int) -> list[TelemetryRecord]:
        return [reading(d, s) for d in devices for s in range(k * PER_ROUND, (k + 1) * PER_ROUND)]

    def published() -> dict[str, list[dict[str, Any]]]:
        by_device: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for key, value in read_to_end(isolated, params_topic):
            record = json.loads(value)
            assert key == record["device_id"].encode()
            by_device[record["device_id"]].append(record)
        return by_device

    def learned_up_to(k: int) -> bool:
        """Every device's latest parameters include round ``k``."""
        last = START_MS + ((k + 1) * PER_ROUND - 1) * MINUTE_MS
        seen = published()
        return all(seen[d] and seen[d][-1]["trained_to_ms"] == last for d in devices)

    # a first round in the log before the trainer starts: learned in its first batch
    first = rounds(0)
    produce(isolated, first)
    proc = isolated.start("train", "train", env=env)
    wait_until(lambda: learned_up_to(0), 180, "the parameters of every device on model.params")
    for d in devices:
        ours = [r for r in first if r.device_id == d]
        expected = learn_device(None, long_form(ours))
        assert expected is not None
        (record,) = published()[d]
        assert record["params"] == json.loads(expected)
        assert (record["version"], record["kind"]) == (1, "combined")
        assert (record["trained_from_ms"], record["trained_to_ms"]) == (
            ours[0].event_ms,
            ours[-1].event_ms,
        )

    # more readings while it runs: learned on top, with higher versions
    produce(isolated, rounds(1))
    wait_until(lambda: learned_up_to(1), 120, "every device to learn the second round")
    ends = isolated.end_offsets(raw)
    wait_until(lambda: committed_offsets(checkpoint, raw) == ends, 60, "the batch to commit")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0

    # a restart resumes from the checkpoint: new readings only, no version published twice
    produce(isolated, rounds(2))
    again = isolated.start("train-again", "train", env=env)
    wait_until(lambda: learned_up_to(2), 180, "every device to learn the third round")
    # stopped right after publishing, the batch that published is committed: not re-published
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=60) == 0
    assert committed_offsets(checkpoint, raw) == isolated.end_offsets(raw)
    for d, records in published().items():
        versions = [r["version"] for r in records]
        assert versions == list(range(1, len(versions) + 1)), (d, versions)
        assert len(versions) >= 3


def read_to_end(isolated: Isolated, topic: str) -> list[tuple[bytes | None, bytes]]:
    """Every record of ``topic`` up to its current end, in partition order."""
    ends = isolated.end_offsets(topic)
    consumer = isolated.consumer()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    out: list[tuple[bytes | None, bytes]] = []
    remaining = {p for p, end in ends.items() if end > 0}
    try:
        while remaining:
            msg = consumer.poll(10)
            assert msg is not None, f"{topic} stopped short of its end offsets {ends}"
            if msg.error() is not None:
                continue
            key = msg.key()
            out.append((key if isinstance(key, bytes) else None, msg.value() or b""))
            partition, offset = msg.partition(), msg.offset()
            if partition is not None and offset is not None and offset + 1 >= ends[partition]:
                remaining.discard(partition)
    finally:
        consumer.close()
    return out


def test_a_backfill_learns_its_range_then_files_continue_the_versions(
    isolated: Isolated, tmp_path: Path
) -> None:
    device = f"dev{isolated.tag}"
    env = {**isolated.env, "FLEETWATCH_TRAIN__TRACKING": "false"}
    produce(isolated, [reading(device, s) for s in range(60)])
    lo, hi = START_MS + 10 * MINUTE_MS, START_MS + 40 * MINUTE_MS

    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat()

    ranged = fleetwatch("train", "--from", iso(lo), "--to", iso(hi), env=env, timeout=300)
    assert ranged.returncode == 0, ranged.stderr
    (first,) = [json.loads(v) for _, v in read_to_end(isolated, isolated.topics.model_params)]
    assert (first["version"], first["trained_from_ms"]) == (1, lo)
    assert first["trained_to_ms"] == hi - MINUTE_MS

    # files of telemetry records, same plan: seeded from model.params, so version 2 follows
    later = [reading(device, s) for s in range(100, 130)]
    (tmp_path / "later.jsonl").write_text("".join(encode(r).decode() + "\n" for r in later))
    files = fleetwatch("train", "--files", str(tmp_path / "later.jsonl"), env=env, timeout=300)
    assert files.returncode == 0, files.stderr
    records = [json.loads(v) for _, v in read_to_end(isolated, isolated.topics.model_params)]
    assert [r["version"] for r in records] == [1, 2]
    assert (records[1]["trained_from_ms"], records[1]["trained_to_ms"]) == (lo, later[-1].event_ms)


def test_a_tracked_backfill_leaves_its_run_and_a_challenger_fleet_model_in_mlflow(
    isolated: Isolated, tmp_path: Path
) -> None:
    from fleetwatch.fleet.registry import ModelRegistry, champion_params
    from fleetwatch.fleet.store import client_for, experiment_id

    devices = [f"m{isolated.tag}-{i}" for i in range(3)]
    produce(isolated, [reading(d, s) for d in devices for s in range(60)])
    env = {**isolated.env, "FLEETWATCH_TRAIN__TRACKING": "true"}
    settings = seed_store(Settings(run_dir=tmp_path))  # the isolated run dir holds the store
    result = fleetwatch(
        "train",
        "--from",
        datetime.fromtimestamp(START_MS / 1000, UTC).isoformat(),
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr

    client = client_for(settings)
    runs = client.search_runs([experiment_id(client, settings)])
    assert len(runs) == 1
    assert runs[0].data.params["mode"] == "backfill"
    assert runs[0].data.metrics["devices_updated"] >= 1

    registry = ModelRegistry(settings)
    name = "fleetwatch-humidity_temperature"
    assert name in registry.names()
    (version,) = registry.versions(name)
    assert version.aliases == ("challenger",)
    assert version.run_id == runs[0].info.run_id

    promoted = fleetwatch("models", "promote", name, env=env)
    assert promoted.returncode == 0, promoted.stderr
    params = champion_params(settings, "humidity_temperature")
    assert params is not None
    assert params["kind"] == "fleet"
    assert params["pca"]["kind"] == "pca", "devices of two metrics: a joint model"

    # promote told the scorer: the champion's parameters are on model.params under its scope
    published = dict(read_to_end(isolated, isolated.topics.model_params))
    champion = json.loads(published[b"fleet:humidity_temperature"])
    assert (champion["model"], champion["model_version"], champion["version"]) == (name, 1, 1)
    assert champion["params"] == params
    again = fleetwatch("models", "publish", name, env=env)
    assert again.returncode == 0, again.stderr
    records = [
        json.loads(v)
        for k, v in read_to_end(isolated, isolated.topics.model_params)
        if k == b"fleet:humidity_temperature"
    ]
    assert [r["version"] for r in records] == [1, 2]  # rises per record of the key
