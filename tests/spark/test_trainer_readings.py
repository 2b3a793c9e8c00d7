"""The trainer's input plan (parse, skip what is not a reading, each reading with its device
clock for telling repeats apart downstream), run as a real stream (file source, availableNow,
memory sink) on local Spark: no broker needed, same plan as on Kafka (the source gives a
``value`` column)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
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


def read_stream(spark: Any, tmp_path: Path, lines: list[str]) -> list[dict[str, Any]]:
    source = tmp_path / "in"
    source.mkdir()
    (source / "part-0.txt").write_text("\n".join(lines) + "\n")
    name = f"readings_{uuid.uuid4().hex[:8]}"
    readings = readings_frame(spark.readStream.text(str(source)), "10 minutes")
    query = (
        readings.select("device_id", "seq", "device_event_ms", "metrics")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return [
        r.asDict() for r in spark.sql(f"SELECT * FROM {name} ORDER BY device_id, seq").collect()
    ]


def test_every_metric_of_a_reading_arrives(spark: Any, tmp_path: Path) -> None:
    rows = read_stream(
        spark, tmp_path, [reading("d1", 0, temperature=21.0, humidity=40.0), reading("d2", 0)]
    )
    assert [(r["device_id"], r["seq"]) for r in rows] == [("d1", 0), ("d2", 0)]
    assert rows[0]["metrics"] == {"temperature": 21.0, "humidity": 40.0}


def test_a_record_that_is_not_a_reading_is_skipped(spark: Any, tmp_path: Path) -> None:
    rows = read_stream(spark, tmp_path, ["{broken", '{"seq": 3}', reading("d3", 4, t=99.0)])
    assert [r["seq"] for r in rows] == [4]


def test_a_reading_without_a_device_clock_reads_its_event_time(spark: Any, tmp_path: Path) -> None:
    clocked = json.loads(reading("d4", 9, temperature=80.0)) | {"device_event_ms": 500}
    rows = read_stream(spark, tmp_path, [json.dumps(clocked), reading("d4", 10, t=21.0)])
    assert [(r["seq"], r["device_event_ms"]) for r in rows] == [(9, 500), (10, 1_010)]


def test_a_record_beyond_the_contract_bounds_is_left_out(spark: Any, tmp_path: Path) -> None:
    huge_seq = json.dumps(
        {"device_id": "d5", "seq": 2**70, "event_ms": 1_001, "metrics": {"t": 1.0}}
    )
    rows = read_stream(
        spark, tmp_path, [huge_seq, reading("d5", 2, t=1e300), reading("d5", 3, t=-1e15)]
    )
    assert [r["seq"] for r in rows] == [3]
