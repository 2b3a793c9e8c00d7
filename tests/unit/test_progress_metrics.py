"""A streaming query's progress report → the ``fleetwatch_streaming_*`` metrics, without Spark.

``REPORT`` is a report of the scorer's own plan recorded on local Spark 4.2 (its
``customMetrics`` and observed sums trimmed, these named as the scorer counts now; it read
files), its two sources written in the
shape of Spark's Kafka source (offsets per topic and partition, and the source's
``*OffsetsBehindLatest`` metrics as text), which the scorer on the real stack is checked
against in ``tests/integration/test_metrics.py``.
"""

from __future__ import annotations

import copy
import json
import math
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.streaming.progress_metrics import (
    BATCH_PARTS,
    ProgressMetrics,
    following,
    new_reports,
    offsets_behind,
    progress_exported,
    progress_log,
    source_label,
)
from fleetwatch.streaming.scorer.batch_counts import ScorerMetrics
from tests.polling import wait_until

REPORT: dict[str, Any] = {
    "id": "41008d45-17a3-4cd1-9a81-148b28c1c439",
    "runId": "375672c9-80ba-4bb7-935b-ae21f7c6e288",
    "name": "fleetwatch-score",
    "timestamp": "2026-11-25T00:03:32.195Z",
    "batchId": 2,
    "batchDuration": 2370,
    "numInputRows": 9,
    "inputRowsPerSecond": 0.0,
    "processedRowsPerSecond": 3.8,
    "durationMs": {
        "addBatch": 1244,
        "commitOffsets": 1,
        "getBatch": 11,
        "latestOffset": 2,
        "queryPlanning": 1100,
        "triggerExecution": 2367,
        "walCommit": 2,
    },
    "eventTime": {
        "avg": "2025-11-21T04:48:46.625Z",
        "max": "2025-11-21T04:51:04.000Z",
        "min": "2025-11-21T04:40:00.000Z",
        "watermark": "2025-11-21T04:49:04.000Z",
    },
    "stateOperators": [
        {
            "operatorName": "transformWithStateInPandasExec",
            "numRowsTotal": 2,
            "numRowsUpdated": 2,
            "allUpdatesTimeMs": 633,
            "numRowsRemoved": 0,
            "allRemovalsTimeMs": 0,
            "commitTimeMs": 7,
            "memoryUsedBytes": 1056204,
            "numRowsDroppedByWatermark": 0,
            "numShufflePartitions": 2,
            "numStateStoreInstances": 2,
            "customMetrics": {
                "numRegisteredTimers": 0,
                "numValueStateVars": 2,
                "rocksdbCommitFileSyncLatencyMs": 1,
                "rocksdbSstFileSize": 1945,
            },
        }
    ],
    "sources": [
        {
            "description": "KafkaV2[Subscribe[telemetry.raw]]",
            "startOffset": {"telemetry.raw": {"2": 1190, "1": 1187, "3": 1230, "0": 1199}},
            "endOffset": {"telemetry.raw": {"2": 1192, "1": 1189, "3": 1232, "0": 1201}},
            "latestOffset": {"telemetry.raw": {"2": 1192, "1": 1195, "3": 1232, "0": 1205}},
            "numInputRows": 8,
            "inputRowsPerSecond": 0.0,
            "processedRowsPerSecond": 3.4,
            "metrics": {
                "avgOffsetsBehindLatest": "2.5",
                "maxOffsetsBehindLatest": "6",
                "minOffsetsBehindLatest": "0",
            },
        },
        {
            "description": "KafkaV2[Subscribe[model.params]]",
            "startOffset": {"model.params": {"2": 0, "1": 3, "3": 0, "0": 1}},
            "endOffset": {"model.params": {"2": 0, "1": 4, "3": 0, "0": 1}},
            "latestOffset": {"model.params": {"2": 0, "1": 4, "3": 0, "0": 1}},
            "numInputRows": 1,
            "inputRowsPerSecond": 0.0,
            "processedRowsPerSecond": 0.4,
            "metrics": {
                "avgOffsetsBehindLatest": "0.0",
                "maxOffsetsBehindLatest": "0",
                "minOffsetsBehindLatest": "0",
            },
        },
    ],
    "sink": {"description": "org.apache.spark.sql.kafka010.KafkaSourceProvider$KafkaTable@5d1f"},
    "observedMetrics": {
        "score_counts": {
            "counts": [
                {"name": "scored", "n": 3},
                {"name": "duplicates", "n": 2},
                {"name": "scored", "n": 2},
                {"name": "unreadable", "n": 1},
                {"name": "dead_letters", "n": 1},
                {"name": "alert:open:level:critical", "n": 1},
                {"name": "alert:open:seasonal:critical", "n": 1},
                {"name": "alert:open:dropout:critical", "n": 1},
                {"name": "alert:open:made-up:critical", "n": 4},
                {"name": "quarantined:0", "n": 0},
                {"name": "quarantined:1", "n": 2},
                {"name": "quarantined:1", "n": 1},
                {"name": "scored", "n": None},
            ]
        }
    },
}
WATERMARK_S = datetime(2025, 11, 21, 4, 49, 4, tzinfo=UTC).timestamp()
NEWEST_S = datetime(2025, 11, 21, 4, 51, 4, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(NEWEST_S + 1.5)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"query": "score", **labels})


def test_rows_and_rates_of_the_batch(registry: CollectorRegistry, clock: Clock) -> None:
    ProgressMetrics(registry, clock).record("score", REPORT)
    assert sample(registry, "fleetwatch_streaming_batches_total") == 1
    assert sample(registry, "fleetwatch_streaming_input_rows_total") == 9
    assert sample(registry, "fleetwatch_streaming_input_rows_per_second") == 0.0
    assert sample(registry, "fleetwatch_streaming_processed_rows_per_second") == 3.8
    assert sample(registry, "fleetwatch_streaming_last_progress_timestamp_seconds") == clock.now


def test_the_batch_and_each_of_its_parts_in_seconds(
    registry: CollectorRegistry, clock: Clock
) -> None:
    ProgressMetrics(registry, clock).record("score", REPORT)
    assert sample(registry, "fleetwatch_streaming_batch_duration_seconds_sum") == 2.37
    assert sample(registry, "fleetwatch_streaming_batch_duration_seconds_bucket", le="2.5") == 1
    assert sample(registry, "fleetwatch_streaming_batch_duration_seconds_bucket", le="1.0") == 0
    for part, ms in REPORT["durationMs"].items():
        assert sample(
            registry, "fleetwatch_streaming_batch_part_duration_seconds_sum", part=part
        ) == pytest.approx(ms / 1000)
    assert set(REPORT["durationMs"]) <= set(BATCH_PARTS)


def test_a_part_spark_may_add_later_is_left_out(registry: CollectorRegistry) -> None:
    report = copy.deepcopy(REPORT)
    report["durationMs"]["someNewPhase"] = 5
    ProgressMetrics(registry).record("score", report)
    parts = {
        s.labels["part"]
        for family in registry.collect()
        for s in family.samples
        if "part" in s.labels
    }
    assert parts == set(REPORT["durationMs"])


def test_watermark_and_event_time_lag(registry: CollectorRegistry, clock: Clock) -> None:
    ProgressMetrics(registry, clock).record("score", REPORT)
    assert sample(registry, "fleetwatch_streaming_watermark_timestamp_seconds") == WATERMARK_S
    assert sample(registry, "fleetwatch_streaming_event_time_lag_seconds") == 1.5
    assert sample(registry, "fleetwatch_streaming_watermark_lag_seconds") == 121.5
    clock.now += 60  # no report for a minute: the watermark's lag grows at each scrape
    assert sample(registry, "fleetwatch_streaming_watermark_lag_seconds") == 181.5
    assert sample(registry, "fleetwatch_streaming_event_time_lag_seconds") == 1.5


def test_no_watermark_yet_and_a_batch_without_rows_leave_the_lags_alone(
    registry: CollectorRegistry, clock: Clock
) -> None:
    first = copy.deepcopy(REPORT)
    first["eventTime"] = {
        "watermark": "1970-01-01T00:00:00.000Z",
        "max": REPORT["eventTime"]["max"],
    }
    metrics = ProgressMetrics(registry, clock)
    metrics.record("score", first)
    assert sample(registry, "fleetwatch_streaming_watermark_timestamp_seconds") is None
    assert sample(registry, "fleetwatch_streaming_watermark_lag_seconds") is None
    idle = copy.deepcopy(REPORT)
    idle["eventTime"] = {"watermark": REPORT["eventTime"]["watermark"]}
    idle["numInputRows"], idle["inputRowsPerSecond"] = 0, math.nan
    clock.now += 10
    metrics.record("score", idle)
    assert sample(registry, "fleetwatch_streaming_event_time_lag_seconds") == 1.5
    assert sample(registry, "fleetwatch_streaming_input_rows_per_second") == 0.0
    assert sample(registry, "fleetwatch_streaming_input_rows_total") == 9
    assert sample(registry, "fleetwatch_streaming_batches_total") == 2


def test_state_rows_memory_and_commit_per_operator(registry: CollectorRegistry) -> None:
    ProgressMetrics(registry).record("score", REPORT)
    op = {"operator": "transformWithStateInPandasExec"}
    assert sample(registry, "fleetwatch_streaming_state_rows", **op) == 2
    assert sample(registry, "fleetwatch_streaming_state_memory_bytes", **op) == 1056204
    assert sample(registry, "fleetwatch_streaming_state_commit_duration_seconds_sum", **op) == 0.007


def test_offsets_behind_latest_per_source(registry: CollectorRegistry) -> None:
    ProgressMetrics(registry).record("score", REPORT)
    raw, params = {"source": "telemetry.raw"}, {"source": "model.params"}
    assert sample(registry, "fleetwatch_streaming_source_offsets_behind_latest", **raw) == 10
    assert sample(registry, "fleetwatch_streaming_source_offsets_behind_latest", **params) == 0
    name = "fleetwatch_streaming_source_max_partition_offsets_behind_latest"
    assert sample(registry, name, **raw) == 6
    assert sample(registry, name, **params) == 0


def test_the_scorers_counts_come_from_the_reports_observed_sums(
    registry: CollectorRegistry,
) -> None:
    counts = ScorerMetrics(registry)
    counts.record(REPORT)
    counts.record({"observedMetrics": {}})  # a report of a plan without them: nothing
    value = registry.get_sample_value
    assert value("fleetwatch_score_readings_scored_total") == 5
    assert value("fleetwatch_score_late_readings_total") == 0
    assert value("fleetwatch_score_duplicate_readings_total") == 2
    assert value("fleetwatch_score_unreadable_records_total") == 1
    assert value("fleetwatch_score_dead_letters_total") == 1
    assert value("fleetwatch_score_failed_device_batches_total") == 0
    assert value("fleetwatch_score_quarantined_devices") == 2
    # bucket 1's quarantine ends; a bucket not in a batch keeps its last count
    later = [{"name": "quarantined:0", "n": 1}, {"name": "quarantined:1", "n": 0}]
    counts.record({"observedMetrics": {"score_counts": {"counts": later}}})
    assert value("fleetwatch_score_quarantined_devices") == 1
    alerts = "fleetwatch_score_alert_events_total"
    for kind in ("level", "seasonal", "dropout"):
        labels = {"event": "open", "kind": kind, "severity": "critical"}
        assert value(alerts, labels) == 1
    assert value(alerts, {"event": "open", "kind": "level", "severity": "warning"}) == 0
    assert value(alerts, {"event": "open", "kind": "made-up", "severity": "critical"}) is None


def test_every_alert_label_set_reads_0_before_the_first_alert(registry: CollectorRegistry) -> None:
    """A rate over the first batch's alerts needs a sample from before it: a series born at its
    value reads no increase."""
    ScorerMetrics(registry)
    alerts = "fleetwatch_score_alert_events_total"
    for event in ("open", "resolve", "withdraw"):
        for kind in ("level", "seasonal", "pca", "dropout", "other"):
            labels = {"event": event, "kind": kind, "severity": "critical"}
            assert registry.get_sample_value(alerts, labels) == 0
    assert (
        registry.get_sample_value(alerts, {"event": "update", "kind": "level", "severity": "info"})
        is None
    )


@pytest.mark.parametrize(
    ("description", "label"),
    [
        ("KafkaV2[Subscribe[telemetry.raw]]", "telemetry.raw"),
        ("KafkaV2[SubscribePattern[telemetry\\..*]]", "telemetry\\..*"),
        ("FileStreamSource[file:/data/backfill]", "FileStreamSource"),
        ("", "source"),
    ],
)
def test_a_source_is_labelled_by_its_topics_or_its_kind(description: str, label: str) -> None:
    assert source_label(description) == label


def test_offsets_behind_from_json_text_and_from_sources_without_partitions() -> None:
    end = '{"t":{"0":5,"1":7}}'
    latest = '{"t":{"0":9,"1":7,"2":3}}'  # a partition added since: all of it is behind
    assert offsets_behind(end, latest) == 7
    assert offsets_behind({"logOffset": 1}, None) is None
    assert offsets_behind("not json", latest) is None


def test_the_progress_log_keeps_every_report_as_one_json_line(tmp_path: Path) -> None:
    log = progress_log(tmp_path / "logs" / "progress.jsonl")
    assert log is not None
    assert progress_log(None) is None
    reports = [{"batchId": i, "durationMs": {"triggerExecution": 100 + i}} for i in range(3)]
    for report in reports:
        log(report)
    lines = (tmp_path / "logs" / "progress.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == reports


class FakeReport:
    """A JVM ``StreamingQueryProgress`` as py4j hands it: methods, not fields."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.calls = 0

    def batchId(self) -> int:
        self.calls += 1
        return self.batch

    def json(self) -> str:
        self.calls += 1
        return json.dumps({**REPORT, "batchId": self.batch})


def test_new_reports_are_the_batches_after_the_last_handled_oldest_first() -> None:
    reports = [FakeReport(b) for b in range(10, 20)]
    assert [b for b, _ in new_reports(reports, None)] == list(range(10, 20))
    for report in reports:
        report.calls = 0
    found = new_reports(reports, 16)
    assert [b for b, _ in found] == [17, 18, 19]
    assert json.loads(found[0][1])["batchId"] == 17
    assert new_reports(reports, 19) == []
    assert sum(r.calls for r in reports[:6]) == 0  # older reports are not read at all


class FakeJavaQuery:
    def __init__(self) -> None:
        self.reports: list[FakeReport] = []
        self.active = True

    def isActive(self) -> bool:
        return self.active

    def recentProgress(self) -> list[FakeReport]:
        return list(self.reports[-100:])


class FakeQuery:
    def __init__(self, name: str, run_id: str, jquery: FakeJavaQuery) -> None:
        self.name, self.runId, self._jsq = name, run_id, jquery


class FakeSession:
    def __init__(self) -> None:
        self.queries: list[FakeQuery] = []

    @property
    def streams(self) -> FakeSession:
        return self

    @property
    def active(self) -> list[FakeQuery]:
        return [q for q in self.queries if q._jsq.active]


def test_following_hands_on_each_report_of_the_named_query_once_in_order() -> None:
    spark = FakeSession()
    score, other = FakeJavaQuery(), FakeJavaQuery()
    spark.queries = [FakeQuery("fleetwatch-score", "run-1", score), FakeQuery("x", "r", other)]
    other.reports = [FakeReport(0)]
    seen: list[int] = []

    def handle(report: dict[str, Any]) -> None:
        seen.append(report["batchId"])
        if report["batchId"] == 3:
            raise ValueError("a handler's failure stays in the handler")

    def handed_on(batch: int) -> bool:
        return len(seen) > batch

    with following(spark, "fleetwatch-score", handle, every_s=0.01):  # type: ignore[arg-type]
        for batch in range(150):  # more than the query holds at once, between two polls too
            score.reports.append(FakeReport(batch))
            if batch % 40 == 0:  # at most 40 unread, fewer than the query keeps
                wait_until(partial(handed_on, batch), 10, f"report {batch}", interval_s=0.01)
        score.reports.append(FakeReport(150))
        score.active = False  # ends within the block: its last report is still handed on
    assert seen == list(range(151))


def test_the_rules_query_beside_the_scorer_is_exported_under_its_own_label(
    registry: CollectorRegistry,
) -> None:
    """The scorer's session also runs the rules query (restarted per change, a new run each
    time): its batches reach the same metrics labelled ``query="rules"``, and the scorer's own
    handlers see only the scorer's reports."""
    spark = FakeSession()
    score, rules_1, rules_2 = FakeJavaQuery(), FakeJavaQuery(), FakeJavaQuery()
    spark.queries = [
        FakeQuery("fleetwatch-score", "s", score),
        FakeQuery("fleetwatch-rules", "r1", rules_1),
    ]
    seen: list[int] = []

    def batches(query: str) -> float:
        value = registry.get_sample_value("fleetwatch_streaming_batches_total", {"query": query})
        return value or 0.0

    with progress_exported(
        spark,  # type: ignore[arg-type]
        "score",
        registry,
        (lambda report: seen.append(report["batchId"]),),
        beside=("rules",),
    ):
        score.reports = [FakeReport(b) for b in range(3)]
        rules_1.reports = [FakeReport(b) for b in range(2)]
        wait_until(lambda: batches("rules") == 2 and batches("score") == 3, 10, "first reports")
        rules_1.active = False  # a change of the rules: the query starts again, a new run
        spark.queries[1] = FakeQuery("fleetwatch-rules", "r2", rules_2)
        rules_2.reports = [FakeReport(2)]
        wait_until(lambda: batches("rules") == 3, 10, "the new run's report")
    assert seen == [0, 1, 2]
