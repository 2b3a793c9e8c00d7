"""The scorer's Spark plan, run as a real stream (file source, availableNow, memory sink) on
local Spark: no broker needed, same plan as on Kafka (the source gives a `value` column)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.contracts.settings import Settings
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.streaming.score import alerts_frame, readings_frame
from fleetwatch.streaming.session import build_session

DETECTOR = FixedBaseline(bands={"temperature": (21.0, 8.0)})


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = build_session(Settings(), "fleetwatch-test")
    yield session
    session.stop()


def reading(device: str, seq: int, **metrics: float) -> str:
    body = {"device_id": device, "seq": seq, "event_ms": 1_000 + seq, "received_ms": 1_005 + seq}
    return json.dumps({**body, "metrics": metrics})


def score_stream(spark: Any, tmp_path: Path, lines: list[str]) -> list[dict[str, Any]]:
    source = tmp_path / "in"
    source.mkdir()
    (source / "part-0.txt").write_text("\n".join(lines) + "\n")
    name = f"alerts_{uuid.uuid4().hex[:8]}"
    alerts = alerts_frame(
        readings_frame(spark.readStream.text(str(source)), "10 minutes"), DETECTOR
    )
    query = (
        alerts.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return [
        r.asDict() for r in spark.sql(f"SELECT * FROM {name} ORDER BY device_id, seq").collect()
    ]


def test_only_the_outlying_metric_of_a_reading_alerts(spark: Any, tmp_path: Path) -> None:
    lines = [
        reading("d1", 0, temperature=21.0, humidity=40.0),
        reading("d1", 1, temperature=52.0, humidity=41.0),
        reading("d2", 0, temperature=20.5),
    ]
    alerts = score_stream(spark, tmp_path, lines)
    assert [(a["device_id"], a["seq"], a["metric"]) for a in alerts] == [("d1", 1, "temperature")]
    assert alerts[0]["params_version"] == 0
    assert 0 < alerts[0]["score"] < 1


def test_a_record_that_is_not_a_reading_is_skipped(spark: Any, tmp_path: Path) -> None:
    alerts = score_stream(spark, tmp_path, ["{broken", reading("d3", 4, temperature=99.0)])
    assert [a["seq"] for a in alerts] == [4]


def test_a_repeated_reading_is_scored_once(spark: Any, tmp_path: Path) -> None:
    spike = reading("d4", 9, temperature=80.0)
    alerts = score_stream(
        spark, tmp_path, [spike, spike, reading("d4", 10, temperature=21.0), spike]
    )
    assert [(a["device_id"], a["seq"]) for a in alerts] == [("d4", 9)]
