"""The trainer's input plan (records parsed and checked as the scorer checks them, packed per
device, each reading with its device clock for telling repeats apart downstream), run as a real
stream (file source, availableNow, memory sink) on local Spark: no broker needed, same plan as
on Kafka (the source gives a ``value`` column)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.contracts.settings import Settings
from fleetwatch.streaming.spark_session import build_session
from fleetwatch.streaming.trainer.processor import readings_frame
from tests.jvm import with_quick_jit


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = build_session(with_quick_jit(Settings()), "fleetwatch-test")
    yield session
    session.stop()


def reading(device: str, seq: int, **metrics: float) -> str:
    body = {"device_id": device, "seq": seq, "event_ms": 1_000 + seq, "received_ms": 1_005 + seq}
    return json.dumps({**body, "metrics": metrics})


def read_stream(
    spark: Any, tmp_path: Path, lines: Sequence[str | bytes], **window: int
) -> dict[str, dict[str, Any]]:
    """Each device's packed entries, the ``(seq, device clock, metric, value)`` of each."""
    source = tmp_path / "in"
    source.mkdir()
    raw = [line if isinstance(line, bytes) else line.encode() for line in lines]
    (source / "part-0.txt").write_bytes(b"\n".join(raw) + b"\n")
    name = f"readings_{uuid.uuid4().hex[:8]}"
    readings = readings_frame(spark.readStream.text(str(source)), "10 minutes", **window)
    query = (
        readings.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = [r.asDict() for r in spark.sql(f"SELECT * FROM {name}").collect()]
    return {
        r["device_id"]: {
            "entries": list(zip(r["seq"], r["device_ms"], r["metric"], r["value"], strict=True)),
            "newest_ms": r["newest_ms"],
        }
        for r in rows
    }


def test_every_metric_of_a_reading_arrives(spark: Any, tmp_path: Path) -> None:
    rows = read_stream(
        spark, tmp_path, [reading("d1", 0, temperature=21.0, humidity=40.0), reading("d2", 0)]
    )
    assert rows == {
        "d1": {
            "entries": [(0, 1_000, "temperature", 21.0), (0, 1_000, "humidity", 40.0)],
            "newest_ms": 1_000,
        }
    }  # d2's reading has no metric: nothing to learn


def test_a_record_that_is_not_a_reading_is_skipped(spark: Any, tmp_path: Path) -> None:
    not_utf8 = b'{"device_id": "d3", "seq": 5, "event_ms": 1, "metrics": {"\xff": 1.0}}'
    lines: list[str | bytes] = ["{broken", '{"seq": 3}', reading("d3", 4, t=99.0), not_utf8]
    rows = read_stream(spark, tmp_path, lines)
    assert [e[0] for e in rows["d3"]["entries"]] == [4]


def test_a_reading_without_a_device_clock_reads_its_event_time(spark: Any, tmp_path: Path) -> None:
    clocked = json.loads(reading("d4", 9, temperature=80.0)) | {"device_event_ms": 500}
    rows = read_stream(spark, tmp_path, [json.dumps(clocked), reading("d4", 10, t=21.0)])
    assert [(e[0], e[1]) for e in rows["d4"]["entries"]] == [(9, 500), (10, 1_010)]
    assert rows["d4"]["newest_ms"] == 1_010


def test_a_record_beyond_the_contract_bounds_is_left_out(spark: Any, tmp_path: Path) -> None:
    huge_seq = json.dumps(
        {"device_id": "d5", "seq": 2**70, "event_ms": 1_001, "metrics": {"t": 1.0}}
    )
    beyond_timestamps = json.dumps(
        {"device_id": "d5", "seq": 4, "event_ms": 10**16, "metrics": {"t": 1.0}}
    )
    lines = [huge_seq, reading("d5", 2, t=1e300), reading("d5", 3, t=-1e15), beyond_timestamps]
    rows = read_stream(spark, tmp_path, lines)
    assert [e[0] for e in rows["d5"]["entries"]] == [3]


def test_a_backfill_keeps_only_its_range_of_event_time(spark: Any, tmp_path: Path) -> None:
    lines = [reading("d6", s, t=float(s)) for s in range(5)]
    rows = read_stream(spark, tmp_path, lines, from_ms=1_001, to_ms=1_004)
    assert [e[0] for e in rows["d6"]["entries"]] == [1, 2, 3]
