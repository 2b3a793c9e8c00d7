"""The scorer as "Running at scale" runs it: submitted with ``spark-submit`` to a Spark
standalone cluster (a master and a worker of the installed pyspark), its checkpoint on an
S3-compatible store through ``s3a://``. It is killed with SIGKILL mid-stream and submitted
again: the new run carries on from the checkpoint in the store (the same first batch, later
batch numbers), and every alert episode comes out once, none lost and none doubled."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

import fleetwatch.streaming.submit as submit_entry
from fleetwatch.kafka_config import client_config
from fleetwatch.stack.processes import wait_for
from fleetwatch.streaming.checkpoint_files import join
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION
from fleetwatch.streaming.scorer.replay import IGNORED
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


def submitted(
    cluster: Cluster, isolated: Isolated, store: S3Store, log: Path
) -> subprocess.Popen[bytes]:
    """``spark-submit … submit.py score``, as the README says, with the store's keys in the
    environment only."""
    settings = isolated.settings
    kafka_jars = sorted(str(p) for p in settings.spark_jars_dir.glob("*.jar"))
    env = dict(isolated.env)
    env.update(
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
        }
    )
    command = [
        str(BIN / "spark-submit"),
        "--master", cluster.master,
        "--driver-class-path", f"{settings.s3a_jars_dir.resolve()}/*",
        "--jars", ",".join(kafka_jars),
        "--conf", "spark.executor.memory=1g",
        str(submit_entry.__file__), "score",
    ]  # fmt: skip
    proc = started(command, log, env)
    assert not any(SECRET_KEY in arg or ACCESS_KEY in arg for arg in command)
    return proc


def test_the_scorer_on_a_standalone_cluster_resumes_from_its_checkpoint_on_s3(
    isolated: Isolated, tmp_path: Path
) -> None:
    raw, alerts = isolated.topics.telemetry_raw, isolated.topics.alerts
    devices = [f"d{isolated.tag}-{i}" for i in range(DEVICES)]
    producer = Producer(client_config(isolated.settings.kafka))
    with (
        s3_store(tmp_path, "fleetwatch", ACCESS_KEY, SECRET_KEY) as store,
        standalone_cluster(tmp_path) as cluster,
    ):
        checkpoint = versioned(store.uri(f"checkpoints-{isolated.tag}"), "score", PLAN_VERSION)

        def committed() -> dict[int, int]:
            return committed_offsets(checkpoint, raw, store)

        first = submitted(cluster, isolated, store, tmp_path / "score-1.log")
        try:

            def query_on_s3() -> bool:
                assert first.poll() is None, f"spark-submit exited; see {tmp_path}/score-1.log"
                return store.exists(join(checkpoint, "metadata"))

            wait_until(query_on_s3, 120, "the scoring query to start on s3")
            produce(producer, raw, devices, range(0, 70))
            wait_until(lambda: committed() == isolated.end_offsets(raw), 120, "the first readings")
            first_batch = store.read_text(join(checkpoint, "offsets", "0"))

            # SIGKILL the driver (spark-submit's JVM and its Python) while a micro-batch of the
            # readings with the second spike is under way, if one is caught in time
            produce(producer, raw, devices, range(70, 110))
            wait_for(lambda: committed() != isolated.end_offsets(raw), 10, 0.05)
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(30)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
        at_kill = committed()
        planned = [int(n) for n in store.names(join(checkpoint, "offsets")) if n.isdigit()]
        logger.info("killed with %s committed, batches %s planned", at_kill, sorted(planned))
        wait_until(lambda: cluster.active_apps() == 0, 60, "the killed scorer's executors to go")
        produce(producer, raw, devices, range(110, READINGS))

        second = submitted(cluster, isolated, store, tmp_path / "score-2.log")
        try:
            ends = isolated.end_offsets(raw)
            assert sum(ends.values()) == DEVICES * READINGS
            wait_until(lambda: committed() == ends, 120, "the resubmitted scorer to catch up")
            live = [json.loads(r.value) for r in isolated.read_all(alerts, 4 * DEVICES)]
            commits = [int(n) for n in store.names(join(checkpoint, "commits")) if n.isdigit()]
            # carried on from the store: the first batch is the one written before the kill,
            # and the batches went on from where the first run had planned to
            assert store.read_text(join(checkpoint, "offsets", "0")) == first_batch
            assert max(commits) >= max(planned)
        finally:
            # SIGTERM to the driver's Python, as a stage stops: its query stops after the batch
            # under way and spark-submit's JVM exits with its exit code
            for pid in children(second.pid):
                os.kill(pid, signal.SIGTERM)
            code = second.wait(60)
        assert code == 0, f"the resubmitted scorer exited {code}; see {tmp_path}/score-2.log"

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
    # the keys went to the JVM, not to its command line nor to a log
    for log in tmp_path.glob("*.log"):
        assert SECRET_KEY not in log.read_text(errors="replace"), log
