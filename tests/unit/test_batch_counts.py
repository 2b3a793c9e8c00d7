"""The scorer's per-batch counts: taken from a bucket's micro-batch in the worker, carried as
count rows of the operator's output, each name one aggregate of the progress report."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleetwatch.contracts.alerts import ALERT_KINDS, RULE_KIND
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.models.registry import KINDS
from fleetwatch.streaming.buckets import BUCKETS
from fleetwatch.streaming.scorer import bucket_step
from fleetwatch.streaming.scorer.batch_counts import (
    COUNT_NAMES,
    COUNT_ROLE,
    READING_COUNTS,
    bucket_counts,
    quarantined,
)
from fleetwatch.streaming.scorer.bucket_step import (
    BucketBatch,
    BucketOutput,
    MemoryStore,
    new_bucket,
    score_bucket,
)
from fleetwatch.streaming.scorer.device_moves import DEVICE_WIDE_KIND
from fleetwatch.streaming.scorer.device_step import Role
from fleetwatch.streaming.scorer.episodes import DROPOUT
from fleetwatch.streaming.scorer.processor import OUTPUT_COLUMNS, output_frame
from fleetwatch.streaming.scorer.readings import Record, Rows
from tests.unit.test_device_scoring import POLICY, T0, frame


def alert(status: str, detector: str, severity: str = "warning") -> str:
    return json.dumps({"status": status, "detector": detector, "severity": severity})


def test_a_real_batch_counts_its_readings_duplicates_late_ones_and_alerts() -> None:
    bucket, store = new_bucket(), MemoryStore()
    first = [(1, T0, 21.0), (2, T0 + 1000, 21.0)]
    score_bucket(bucket, BucketBatch({"d1": Rows.of(frame(first))}), 0, T0, POLICY, store)
    again = [(2, T0 + 1000, 21.0), (3, T0 + 2000, 60.0), (0, T0 - 600_000, 21.0)]
    watermark = T0 - 60_000  # the last reading is behind it
    out = score_bucket(
        bucket, BucketBatch({"d1": Rows.of(frame(again))}), watermark, T0, POLICY, store
    )
    counts = bucket_counts(out, unreadable=2)
    assert counts["scored"] == 1
    assert counts["duplicates"] == 1
    assert counts["late"] == 1
    assert counts["unreadable"] == 2
    assert counts["dead_letters"] == 2
    assert "failed" not in counts
    opened = {k: v for k, v in counts.items() if k.startswith("alert:open:")}
    assert opened == {"alert:open:fixed-baseline:critical": 1}


def test_alert_events_are_counted_by_event_kind_and_severity() -> None:
    out = BucketOutput(
        records=[
            ("d1", Role.ALERTS, alert("open", "level", "critical")),
            ("d2", Role.ALERTS, alert("open", "level", "critical")),
            ("d1", Role.ALERTS, alert("update", "level", "critical")),  # not counted
            ("d3", Role.ALERTS, alert("resolve", "dropout")),
            ("d4", Role.ALERTS, alert("withdraw", "a-detector-added-later", "info")),
            ("d1", Role.STATE, json.dumps({"status": "open"})),  # not an alert
        ],
    )
    assert bucket_counts(out) == {
        "alert:open:level:critical": 2,
        "alert:resolve:dropout:warning": 1,
        "alert:withdraw:other:info": 1,
    }
    assert set(bucket_counts(out)) <= set(COUNT_NAMES)


def test_count_rows_follow_the_records_and_carry_no_topic() -> None:
    topics = {Role.ALERTS: "alerts", Role.STATE: "device.state"}
    records = [("d1", Role.ALERTS, alert("open", "level"))]
    counts = {"scored": 4, "alert:open:level:warning": 1}
    frame_ = output_frame(records, topics, counts=counts).set_axis(OUTPUT_COLUMNS, axis=1)
    assert list(frame_["role"]) == ["alerts", COUNT_ROLE, COUNT_ROLE]
    assert list(frame_["key"])[1:] == ["scored", "alert:open:level:warning"]
    assert list(frame_["value"])[1:] == ["4", "1"]
    assert frame_["topic"].iloc[1:].isna().all()
    assert frame_["headers"].isna().all()
    assert list(output_frame(records, topics).iloc[:, OUTPUT_COLUMNS.index("role")]) == ["alerts"]


def test_the_names_are_a_fixed_bounded_list_covering_every_registered_detector() -> None:
    named = {*KINDS} - {"combined"} | {FixedBaseline.kind, DROPOUT, DEVICE_WIDE_KIND}
    assert len(ALERT_KINDS) == len(set(ALERT_KINDS))
    assert set(ALERT_KINDS) == named | {RULE_KIND, "other"}, "every kind an alert names, no other"
    alerts = 3 * 3 * len(ALERT_KINDS)
    assert len(COUNT_NAMES) == len(set(COUNT_NAMES)) == len(READING_COUNTS) + alerts + BUCKETS


def test_a_failing_device_is_counted_and_its_quarantine_seen_in_its_bucket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a detector that cannot cope")

    monkeypatch.setattr(bucket_step, "process", broken)
    bucket, store = new_bucket(), MemoryStore()
    now = T0 + 10_000
    for i in range(POLICY.quarantine.after_failures + 1):
        raw = Record(f'{{"seq":{i}}}', (0, i))  # what a dead letter of it carries
        batch = BucketBatch.of(
            {"q1": Rows.of(frame([(i, T0 + i * 1000, 21.0)]))}, (), {"q1": [raw]}
        )
        out = score_bucket(bucket, batch, 0, now, POLICY, store)
        counts = bucket_counts(out)
        if i < POLICY.quarantine.after_failures:
            assert counts["failed"] == 1
        else:  # quarantined now: its readings are held, unscored
            assert counts["held"] == 1
            assert "failed" not in counts
        assert counts["dead_letters"] == 1
    assert quarantined(7, bucket, now) == {"quarantined:7": 1}
    until = bucket["devices"]["q1"]["quarantined_until_ms"]
    assert until is not None
    assert quarantined(7, bucket, int(until)) == {"quarantined:7": 0}, "its time is up"
