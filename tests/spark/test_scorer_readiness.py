"""The scorer's ``/readyz`` on a real query (the scorer's plan on file sources, its first
micro-batch held at the sink until the test lets it finish): 503 before the first batch has
completed, 200 after, 503 once the query has stopped."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.contracts.settings import Settings
from fleetwatch.runtime import serve_metrics
from fleetwatch.streaming.readiness import QueryReadiness
from fleetwatch.streaming.scorer.job import scored_frame, scorer_input
from fleetwatch.streaming.spark_session import build_session
from tests.jvm import with_quick_jit
from tests.polling import wait_until
from tests.spark.test_scorer_plan import T0, kafka_row, reading
from tests.unit.test_metrics_endpoint import free_port

SETTINGS = Settings()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = build_session(with_quick_jit(SETTINGS), "fleetwatch-test-scorer-readiness")
    yield session
    session.stop()


def readyz(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read())


def test_the_scorer_is_ready_once_its_first_batch_is_done(spark: Any, tmp_path: Path) -> None:
    raw, params = tmp_path / "raw", tmp_path / "params"
    raw.mkdir()
    params.mkdir()
    lines = [reading("d1", i, T0 + i * 1000, temperature=21.0) for i in range(5)]
    (raw / "1.json").write_text("\n".join(kafka_row(line) for line in lines) + "\n")
    frame = scored_frame(
        scorer_input(
            spark.readStream.schema(
                "key STRING, value STRING, timestamp TIMESTAMP, partition INT, offset LONG"
            ).json(str(raw)),
            spark.readStream.schema(
                "key STRING, value STRING, topic STRING, partition INT, offset LONG"
            ).json(str(params)),
            "1 minute",
            SETTINGS.topics.quarantine_lifts,
        ),
        SETTINGS,
    )
    release = threading.Event()
    written: list[int] = []

    def sink(batch: Any, batch_id: int) -> None:
        batch.collect()
        release.wait(120)  # the first batch completes when the test says so
        written.append(batch_id)

    ready = QueryReadiness()
    port = free_port()
    with serve_metrics(CollectorRegistry(), port, "FLEETWATCH_TEST__METRICS_PORT", ready):
        assert readyz(port) == (503, {"status": "not ready", "query": "not started"})
        query = (
            frame.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="1 second")
            .start()
        )
        try:
            ready.follow(query)
            wait_until(lambda: query.status["isTriggerActive"], 60, "the first micro-batch")
            status, body = readyz(port)
            assert status == 503, body
            assert body["status"] == "not ready"
            assert body["last_batch"] is None
            release.set()
            wait_until(lambda: readyz(port)[0] == 200, 120, "/readyz 200")
            status, body = readyz(port)
            # the first batch is done; a batch with no data for the watermark may follow it
            assert (body["status"], body["query"]) == ("ready", "active")
            assert body["last_batch"] >= 0
            assert written[0] == 0
        finally:
            release.set()
            query.stop()
        assert readyz(port) == (503, {"status": "not ready", "query": "stopped"})
