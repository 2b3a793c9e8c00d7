"""The scorer's Spark plan on a static frame shaped like Kafka rows (local Spark, no broker)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from fleetwatch.contracts.settings import Settings
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.streaming.score import alerts_frame
from fleetwatch.streaming.session import build_session

DETECTOR = FixedBaseline(bands={"temperature": (21.0, 8.0)})


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = build_session(Settings(), "fleetwatch-test")
    yield session
    session.stop()


def kafka_rows(readings: list[dict[str, Any]]) -> list[tuple[bytes, bytes]]:
    return [(r["device_id"].encode(), json.dumps(r).encode()) for r in readings]


def reading(device: str, seq: int, **metrics: float) -> dict[str, Any]:
    return {
        "device_id": device,
        "seq": seq,
        "event_ms": 1_000 + seq,
        "received_ms": 1_005 + seq,
        "metrics": metrics,
    }


def test_only_the_outlying_metric_of_a_reading_alerts(spark: Any) -> None:
    rows = kafka_rows(
        [
            reading("d1", 0, temperature=21.0, humidity=40.0),
            reading("d1", 1, temperature=52.0, humidity=41.0),
            reading("d2", 0, temperature=20.5),
        ]
    )
    frame = spark.createDataFrame(rows, "key BINARY, value BINARY")
    alerts = [r.asDict() for r in alerts_frame(frame, DETECTOR).collect()]
    assert [(a["device_id"], a["seq"], a["metric"]) for a in alerts] == [("d1", 1, "temperature")]
    assert alerts[0]["params_version"] == 0
    assert 0 < alerts[0]["score"] < 1


def test_a_record_that_is_not_a_reading_is_skipped(spark: Any) -> None:
    rows = [(b"x", b"{broken"), *kafka_rows([reading("d3", 4, temperature=99.0)])]
    frame = spark.createDataFrame(rows, "key BINARY, value BINARY")
    assert [r["seq"] for r in alerts_frame(frame, DETECTOR).collect()] == [4]
