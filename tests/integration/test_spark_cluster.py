"""The scorer and the trainer as "Running at scale" runs them: submitted with ``spark-submit``
to a Spark standalone cluster (a master and two workers of the installed pyspark), side by side
(an executor of two cores each), their checkpoints on an S3-compatible store through ``s3a://``.
Both are killed with SIGKILL mid-stream and submitted again: each new run carries on from its
checkpoint in the store (the same first batch, later batch numbers); every alert episode comes
out once, none lost and none doubled; the trainer's parameter versions go on without a reading
learned twice. SIGTERM then stops both with exit code 0."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from confluent_kafka import Producer

import fleetwatch.streaming.submit as submit_entry
from fleetwatch.contracts.topics import topic_specs
from fleetwatch.kafka_config import client_config
from fleetwatch.stack.processes import wait_for
from fleetwatch.stack.topics import ensure_topics
from fleetwatch.streaming.checkpoint_files import join
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION
from fleetwatch.streaming.scorer.replay import IGNORED
from fleetwatch.streaming.trainer.job import JOB as TRAIN_JOB
from fleetwatch.streaming.trainer.job import PLAN_VERSION as TRAIN_PLAN_VERSION
from fleetwatch.streaming.trainer.learning import learn_device
from tests.integration.conftest import Isolated
from tests.integration.processes import children
from tests.integration.spark_cluster import (
    BIN,
    SPARK_HOME,
    Cluster,
    S3Store,
    s3_store,
    standalone_cluster,
    started,
)
from tests.integration.test_train import read_to_end
from tests.jvm import QUICK_JIT
from tests.polling import wait_until

logger = logging.getLogger(__name__)

DEVICES, READINGS = 4, 150
SPIKES = {40: 50.0, 41: 52.0, 42: 50.0, 100: 45.0}  # two episodes per device
T0 = (time.time_ns() // 1_000_000 // 60_000 - 10) * 60_000
ACCESS_KEY, SECRET_KEY = "fleetwatch-test", "not-a-real-secret-4f1c"


def produce(producer: Producer, topic: str, devices: list[str], seqs: range) -> None:
    for seq in seqs:
        event_ms = T0 + seq * 1000
        for device in devices:
            reading = {
                "v": 1,
                "device_id": device,
                "seq": seq,
                "event_ms": event_ms,
                "device_event_ms": event_ms,
                "device_sent_ms": event_ms,
                "received_ms": event_ms + 10,
                "clock_offset_ms": 0,
                "metrics": {"temperature": SPIKES.get(seq, 21.0)},
            }
            producer.produce(
                topic, json.dumps(reading).encode(), key=device.encode(), timestamp=event_ms
            )
    producer.flush(30)


APP_CORES = 2
"""Each job's executor: the cores of one worker (one executor JVM per job, not one per worker)."""


def submitted(
    cluster: Cluster,
    isolated: Isolated,
    store: S3Store,
    job: str,
    log: Path,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``spark-submit … submit.py {job}``, as the README says, with the store's keys in the
    environment only."""
    settings = isolated.settings
    kafka_jars = sorted(str(p) for p in settings.spark_jars_dir.glob("*.jar"))
    job_env = dict(isolated.env)
    job_env.update(
        {
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,  # the driver's and the executors' Python
            "FLEETWATCH_SPARK__CHECKPOINT_DIR": store.uri(f"checkpoints-{isolated.tag}"),
            "FLEETWATCH_OBJECT_STORE__ENDPOINT": store.endpoint,
            "FLEETWATCH_OBJECT_STORE__PATH_STYLE_ACCESS": "true",
            "FLEETWATCH_OBJECT_STORE__REGION": "us-east-1",
            "FLEETWATCH_OBJECT_STORE__ACCESS_KEY": ACCESS_KEY,
            "FLEETWATCH_OBJECT_STORE__SECRET_KEY": SECRET_KEY,
            # one stateful task per batch, so one Python worker per job: two jobs share 2 cores
            "FLEETWATCH_SPARK__SHUFFLE_PARTITIONS": "1",
            **(env or {}),
        }
    )
    command = [
        str(BIN / "spark-submit"),
        "--master", cluster.master,
        "--driver-class-path", f"{settings.s3a_jars_dir.resolve()}/*",
        # spark-submit starts the driver's JVM: the session's java options come too late for it
        "--driver-java-options", QUICK_JIT,
        "--jars", ",".join(kafka_jars),
        "--conf", "spark.executor.memory=1g",
        "--conf", f"spark.executor.cores={APP_CORES}",
        "--conf", f"spark.cores.max={APP_CORES}",
        str(submit_entry.__file__), job,
    ]  # fmt: skip
    proc = started(command, log, job_env)
    assert not any(SECRET_KEY in arg or ACCESS_KEY in arg for arg in command)
    return proc


def long_form(seqs: range) -> pd.DataFrame:
    """One device's readings ``seqs`` in the long form :func:`learn_device` takes."""
    rows = [(T0 + seq * 1000, "temperature", SPIKES.get(seq, 21.0)) for seq in seqs]
    return pd.DataFrame(rows, columns=["event_ms", "metric", "value"])


def batch_numbers(store: S3Store, folder: str) -> list[int]:
    return sorted(int(n) for n in store.names(folder) if n.isdigit())


def terminated(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the driver's Python, as a stage stops: its query stops after the batch under
    way and spark-submit's JVM exits with its exit code."""
    for pid in children(proc.pid):
        os.kill(pid, signal.SIGTERM)


def params_by_device(isolated: Isolated, topic: str) -> dict[str, list[dict[str, Any]]]:
    by_device: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for key, value in read_to_end(isolated, topic):
        record = json.loads(value)
        assert key == record["device_id"].encode()
        by_device[record["device_id"]].append(record)
    return by_device


def test_the_scorer_and_the_trainer_on_a_standalone_cluster_resume_from_checkpoints_on_s3(
    isolated: Isolated, tmp_path: Path
) -> None:
    raw, alerts = isolated.topics.telemetry_raw, isolated.topics.alerts
    # the trainer publishes where the scorer does not read: the scorer's episodes stay those of
    # its defaults, whenever the trainer's parameters would have reached it
    params = f"{isolated.topics.model_params}.trainer"
    (spec,) = [s for s in topic_specs(isolated.topics) if s.name == isolated.topics.model_params]
    ensure_topics(
        isolated.settings.kafka, [replace(spec, name=params)], isolated.settings.kafka.partitions
    )
    train_env = {
        "FLEETWATCH_TOPICS__MODEL_PARAMS": params,
        "FLEETWATCH_TRAIN__TRIGGER_INTERVAL": "1 second",
        "FLEETWATCH_TRAIN__TRACKING": "false",
    }
    devices = [f"d{isolated.tag}-{i}" for i in range(DEVICES)]
    producer = Producer(client_config(isolated.settings.kafka))
    with (
        s3_store(tmp_path, "fleetwatch", ACCESS_KEY, SECRET_KEY) as store,
        standalone_cluster(tmp_path) as cluster,
    ):
        store.ready()
        root = store.uri(f"checkpoints-{isolated.tag}")
        checkpoint = versioned(root, "score", PLAN_VERSION)
        train_checkpoint = versioned(root, TRAIN_JOB, TRAIN_PLAN_VERSION)

        def committed() -> dict[int, int]:
            return committed_offsets(checkpoint, raw, store)

        def learned_up_to(seq: int) -> bool:
            """Every device's latest parameters include reading ``seq``, and that is committed."""
            seen = params_by_device(isolated, params)
            last = T0 + seq * 1000
            if not all(seen[d] and seen[d][-1]["trained_to_ms"] == last for d in devices):
                return False
            return committed_offsets(train_checkpoint, raw, store) == isolated.end_offsets(raw)

        def running(*procs: tuple[subprocess.Popen[bytes], str]) -> None:
            for proc, log in procs:
                assert proc.poll() is None, f"spark-submit exited; see {tmp_path}/{log}"

        score, train = (
            submitted(cluster, isolated, store, "score", tmp_path / "score-1.log"),
            submitted(cluster, isolated, store, "train", tmp_path / "train-1.log", train_env),
        )
        try:

            def queries_on_s3() -> bool:
                running((score, "score-1.log"), (train, "train-1.log"))
                return all(
                    store.exists(join(c, "metadata")) for c in (checkpoint, train_checkpoint)
                )

            wait_until(queries_on_s3, 150, "the scoring and training queries to start on s3")
            produce(producer, raw, devices, range(0, 70))
            wait_until(lambda: committed() == isolated.end_offsets(raw), 120, "the first readings")
            wait_until(lambda: learned_up_to(69), 120, "the trainer to learn the first readings")
            first_batch = store.read_text(join(checkpoint, "offsets", "0"))
            first_train_batch = store.read_text(join(train_checkpoint, "offsets", "0"))

            # SIGKILL the drivers (spark-submit's JVM and its Python) while a micro-batch of the
            # readings with the second spike is under way, if one is caught in time
            produce(producer, raw, devices, range(70, 110))
            wait_for(lambda: committed() != isolated.end_offsets(raw), 10, 0.05)
            for proc in (score, train):
                os.killpg(proc.pid, signal.SIGKILL)
            for proc in (score, train):
                proc.wait(30)
        finally:
            for proc in (score, train):
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
        at_kill = committed()
        planned = batch_numbers(store, join(checkpoint, "offsets"))
        train_planned = batch_numbers(store, join(train_checkpoint, "offsets"))
        logger.info("killed with %s committed, batches %s planned", at_kill, planned)
        wait_until(lambda: cluster.active_apps() == 0, 60, "the killed jobs' executors to go")
        produce(producer, raw, devices, range(110, READINGS))

        score, train = (
            submitted(cluster, isolated, store, "score", tmp_path / "score-2.log"),
            submitted(cluster, isolated, store, "train", tmp_path / "train-2.log", train_env),
        )
        try:
            ends = isolated.end_offsets(raw)
            assert sum(ends.values()) == DEVICES * READINGS

            def caught_up() -> bool:
                running((score, "score-2.log"), (train, "train-2.log"))
                return committed() == ends

            wait_until(caught_up, 150, "the resubmitted scorer to catch up")
            live = [json.loads(r.value) for r in isolated.read_all(alerts, 4 * DEVICES)]
            wait_until(lambda: learned_up_to(READINGS - 1), 90, "the trainer to learn the rest")
            # carried on from the store: the first batch is the one written before the kill,
            # and the batches went on from where the first run had planned to
            assert store.read_text(join(checkpoint, "offsets", "0")) == first_batch
            assert max(batch_numbers(store, join(checkpoint, "commits"))) >= max(planned)
            assert store.read_text(join(train_checkpoint, "offsets", "0")) == first_train_batch
            assert max(batch_numbers(store, join(train_checkpoint, "commits"))) >= max(
                train_planned
            )
        finally:
            terminated(score)
            terminated(train)
            codes = {"score": score.wait(60), "train": train.wait(60)}
        assert codes == {"score": 0, "train": 0}, f"exit codes {codes}; see {tmp_path}/*-2.log"
        assert cluster.alive_workers() == 2

    # every episode once: two per device, each opened and resolved, under one id
    by_event: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in live:
        by_event[event["event_id"]].append({k: v for k, v in event.items() if k not in IGNORED})
    assert all(all(c == copies[0] for c in copies) for copies in by_event.values())
    episodes: dict[str, list[str]] = defaultdict(list)
    for event_id in sorted(by_event, key=lambda e: int(e.rsplit(".", 1)[1])):
        episodes[event_id.rsplit(".", 1)[0]].append(by_event[event_id][0]["status"])
    assert len(episodes) == 2 * DEVICES, sorted(episodes)
    assert all(statuses == ["open", "resolve"] for statuses in episodes.values()), episodes
    starts = {e["start_ms"] - T0 for copies in by_event.values() for e in copies}
    assert starts == {40_000, 100_000}

    # the trainer's versions per device: 1, 2, … with none skipped; a version published again
    # (a batch written before the kill but not committed, recomputed) is the same parameters;
    # each version is its predecessor having learned the readings after the predecessor's, as
    # learn_device computes it: every reading learned once, across the kill
    published = params_by_device(isolated, params)
    assert sorted(published) == devices
    for device, records in published.items():
        by_version: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in records:
            by_version[r["version"]].append({k: v for k, v in r.items() if k != "published_ms"})
        assert sorted(by_version) == list(range(1, len(by_version) + 1)), (device, records)
        assert all(all(c == copies[0] for c in copies) for copies in by_version.values())
        learned, previous_to = None, T0 - 1
        for _, (record, *_) in sorted(by_version.items()):
            seqs = range((previous_to - T0) // 1000 + 1, (record["trained_to_ms"] - T0) // 1000 + 1)
            learned = learn_device(learned, long_form(seqs))
            assert learned is not None
            assert record["params"] == json.loads(learned), (device, record["version"])
            previous_to = record["trained_to_ms"]
        assert previous_to == T0 + (READINGS - 1) * 1000, device

    # the keys went to the JVM, not to its command line nor to a log
    for log in tmp_path.glob("*.log"):
        assert SECRET_KEY not in log.read_text(errors="replace"), log
