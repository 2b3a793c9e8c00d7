"""The trainer's Spark plan as a real stream (file source, availableNow) on local Spark, through
its own ``foreachBatch`` publisher with the Kafka write replaced by a list (Spark's memory sink
cannot restart from a checkpoint in append mode): per-device parameters with increasing
versions across batches, a restart on the same checkpoint that publishes no old version, and a
device silent for ``expire_after`` forgotten with a tombstone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.training import TrainedBatch
from fleetwatch.streaming.spark_session import build_session
from fleetwatch.streaming.trainer.learning import learn_device
from fleetwatch.streaming.trainer.observer import NoopObserver
from fleetwatch.streaming.trainer.processor import (
    FAILED,
    UPDATE_SCHEMA,
    readings_frame,
    updates_frame,
)
from fleetwatch.streaming.trainer.publisher import BatchPublisher
from tests.jvm import with_quick_jit

MINUTE_MS = 60_000
EXPIRE_MS = 30 * 24 * 60 * MINUTE_MS


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = build_session(with_quick_jit(Settings()), "fleetwatch-test-train")
    yield session
    session.stop()


def records(device: str, seqs: range, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng([seed, len(device)])
    return [
        {
            "device_id": device,
            "seq": seq,
            "event_ms": 1_700_000_000_000 + seq * MINUTE_MS,
            "received_ms": 1_700_000_000_005 + seq * MINUTE_MS,
            "metrics": {"temperature": 21.0 + float(rng.normal(0, 0.3))},
        }
        for seq in seqs
    ]


class Recorder(NoopObserver):
    def __init__(self) -> None:
        self.batches: list[tuple[int, int, int | None, int | None]] = []

    def on_batch(self, batch: TrainedBatch) -> None:
        b = batch
        self.batches.append((b.batch_id, b.devices_updated, b.trained_from_ms, b.trained_to_ms))


class Collecting(BatchPublisher):
    """The publisher with its Kafka write replaced by a list of ``(key, record value)``."""

    def __init__(self, observer: Recorder) -> None:
        super().__init__(Settings(), observer)
        self.records: list[tuple[str, dict[str, Any] | None]] = []

    def write(self, records: Any) -> None:
        self.records += [
            (r["key"], None if r["value"] is None else json.loads(r["value"]))
            for r in records.collect()
        ]


def train_once(
    spark: Any, source: Path, checkpoint: Path
) -> tuple[list[tuple[str, dict[str, Any] | None]], Recorder]:
    """One availableNow run of the plan on ``checkpoint``: the records it published (a
    tombstone's value ``None``)."""
    observer = Recorder()
    publisher = Collecting(observer)
    readings = readings_frame(spark.readStream.text(str(source)), "10 minutes")
    updates = updates_frame(readings, EXPIRE_MS)
    query = (
        updates.writeStream.foreachBatch(publisher)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return sorted(publisher.records, key=lambda r: r[0]), observer


def write(source: Path, name: str, rows: list[dict[str, Any]]) -> None:
    (source / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_versions_increase_per_device_and_a_restart_republishes_nothing(
    spark: Any, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    first = records("d1", range(40)) + records("d22", range(40))
    write(source, "part-0.txt", first + first[:5])  # repeats are learned once

    one, observed = train_once(spark, source, checkpoint)
    assert [(key, r and r["device_id"], r and r["version"]) for key, r in one] == [
        ("d1", "d1", 1),
        ("d22", "d22", 1),
    ]
    expected = learn_device(None, long_form(records("d1", range(40))))
    assert expected is not None
    assert one[0][1] is not None
    assert one[0][1]["params"] == json.loads(expected)
    assert observed.batches == [(0, 2, first[0]["event_ms"], first[39]["event_ms"])]

    # a restart on the same checkpoint with one new file: only d1 learned more, as version 2
    write(source, "part-1.txt", records("d1", range(40, 60), seed=1))
    two, observed = train_once(spark, source, checkpoint)
    assert [(key, r and r["version"]) for key, r in two] == [("d1", 2)]
    record = two[0][1]
    assert record is not None
    assert record["trained_from_ms"] == first[0]["event_ms"]
    assert record["trained_to_ms"] == 1_700_000_000_000 + 59 * MINUTE_MS
    incremental = learn_device(expected, long_form(records("d1", range(40, 60), seed=1)))
    assert incremental is not None
    assert record["params"] == json.loads(incremental)
    assert [b[1] for b in observed.batches] == [1]

    # and a restart with nothing new publishes nothing
    three, _ = train_once(spark, source, checkpoint)
    assert three == []


def test_a_device_silent_for_expire_after_is_forgotten_with_a_tombstone(
    spark: Any, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    write(source, "part-0.txt", records("quiet", range(20)) + records("busy", range(20)))
    one, _ = train_once(spark, source, checkpoint)
    assert [(key, r is not None) for key, r in one] == [("busy", True), ("quiet", True)]

    # "busy" reports again past quiet's expiry; the watermark passes it, and quiet is forgotten
    later = EXPIRE_MS // MINUTE_MS + 30
    write(source, "part-1.txt", records("busy", range(later, later + 20), seed=2))
    two, observed = train_once(spark, source, checkpoint)
    assert sorted((key, None if r is None else r["version"]) for key, r in two) == [
        ("busy", 2),
        ("quiet", None),
    ]
    assert [b[1] for b in observed.batches] == [1]  # the tombstone is not a device updated

    # quiet back: afresh, at version 1
    write(source, "part-2.txt", records("quiet", range(later + 20, later + 40), seed=3))
    three, _ = train_once(spark, source, checkpoint)
    assert [(key, r["version"] if r else None) for key, r in three] == [("quiet", 1)]


def long_form(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"event_ms": r["event_ms"], "metric": m, "value": v}
            for r in rows
            for m, v in r["metrics"].items()
        ]
    )


def test_a_failed_device_is_counted_never_written_and_outside_the_learned_range(
    spark: Any,
) -> None:
    observer = Recorder()
    publisher = Collecting(observer)
    failures: list[int] = []
    publisher.on_failed = failures.append
    updates = spark.createDataFrame(
        [
            ("ok", 4, 1_000, 2_000, '{"params": 1}'),
            ("broken", FAILED, 500, 9_000, None),
            ("gone", None, None, None, None),
        ],
        UPDATE_SCHEMA,
    )
    publisher(updates, 7)
    assert sorted(publisher.records, key=lambda r: r[0]) == [("gone", None), ("ok", {"params": 1})]
    assert failures == [1]
    assert observer.batches == [(7, 1, 1_000, 2_000)]  # the failed device's readings: not learned
