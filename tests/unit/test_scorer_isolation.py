"""One device never stops the bucket: a device whose batch raises keeps its state as before the
batch, its records go to the dead letters with the reason, and repeated failures quarantine it
until its time is up or a lift record arrives; devices silent for ``expire_after`` leave the
state; records that are not readings are refused with a specific reason and their place."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
from typing import Any

import pandas as pd
import pytest

from fleetwatch.contracts.devices import DeviceState
from fleetwatch.streaming.scorer import bucket_step, device_step
from fleetwatch.streaming.scorer.bucket_step import (
    BucketBatch,
    BucketOutput,
    BucketState,
    MemoryStore,
    arm_timer,
    expire_bucket,
    new_bucket,
    score_bucket,
)
from fleetwatch.streaming.scorer.device_state import new_state
from fleetwatch.streaming.scorer.device_step import Role, wants_timer
from fleetwatch.streaming.scorer.processor import (
    OUTPUT_COLUMNS,
    dead_letter_headers,
    output_frame,
)
from fleetwatch.streaming.scorer.quarantine import Rule, lift_key, lift_value
from fleetwatch.streaming.scorer.readings import Record, Rows, readings_by_device
from tests.unit.test_device_scoring import POLICY, T0, frame

RULE = Rule(after_failures=3, hold_ms=600_000)
STRICT = replace(POLICY, quarantine=RULE, expire_after_ms=24 * 3_600_000)


class Boom(RuntimeError):
    pass


@pytest.fixture
def bad_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Device ``bad``'s batches raise inside the device step, as any bug of it would."""
    real = device_step.process

    def process(device_id: str, *args: Any, **kwargs: Any) -> Any:
        if device_id == "bad":
            state = args[0]
            if state is not None:
                state["last_values"] = {"temperature": -1.0}  # a half-done change to undo
            raise Boom("value out of its mind")
        return real(device_id, *args, **kwargs)

    monkeypatch.setattr(bucket_step, "process", process)


def records(device_id: str, start_seq: int, n: int, offset0: int) -> tuple[Rows, list[Record]]:
    rows = frame([(start_seq + i, T0 + (start_seq + i) * 1000, 21.0) for i in range(n)])
    texts = [
        Record(json.dumps({"seq": start_seq + i, "device": device_id}), (0, offset0 + i))
        for i in range(n)
    ]
    return Rows.of(rows), texts


def batch(seq: int, offset0: int, lifts: list[tuple[str, str]] = ()) -> BucketBatch:  # type: ignore[assignment]
    good_rows, good_records = records("good", seq, 2, offset0)
    bad_rows, bad_records = records("bad", seq, 2, offset0 + 2)
    return BucketBatch.of(
        {"good": good_rows, "bad": bad_rows},
        list(lifts),
        {"good": good_records, "bad": bad_records},
    )


def states(out: BucketOutput, device_id: str) -> list[dict[str, Any]]:
    return [json.loads(v) for d, role, v in out.records if d == device_id and role == Role.STATE]


def seed(bucket: BucketState, store: MemoryStore) -> None:
    """Both devices scored once, before anything goes wrong."""
    score_bucket(bucket, batch(1, 0), T0 - 60_000, T0, STRICT, store)


@pytest.mark.usefixtures("bad_device")
def test_a_failing_device_keeps_its_state_dead_letters_its_records_and_others_are_scored() -> None:
    bucket, store = new_bucket(), MemoryStore()
    bucket["devices"]["bad"] = new_state()
    bucket["devices"]["bad"]["last_values"] = {"temperature": 21.0}
    before = pickle.dumps(bucket["devices"]["bad"])
    out = score_bucket(bucket, batch(10, 100), T0 - 60_000, T0, STRICT, store)

    assert out.failed == 1
    assert out.scored == 2  # good's two readings
    assert bucket["devices"]["good"]["last_seq"] == 11
    dead = {(d.device_id, d.record.source) for d in out.dead}
    assert dead == {("bad", (0, 102)), ("bad", (0, 103))}
    assert all(d.reason == "scoring failed: Boom: value out of its mind" for d in out.dead)
    bad = bucket["devices"]["bad"]
    assert bad["failures"] == 1
    assert bad["last_values"] == {"temperature": 21.0}  # the half-done change is undone
    was = pickle.loads(before)
    restored = {**was, "failures": 1, "quarantine_reason": bad["quarantine_reason"]}
    # ... and, never seen a reading of, its expiry timer armed: expire_after past the watermark
    assert bad == {**restored, "timer_ms": bad["timer_ms"]}
    assert bad["timer_ms"] == wants_timer(was, STRICT, T0 - 60_000)
    assert bad["timer_ms"] == T0 - 60_000 + STRICT.expire_after_ms


@pytest.mark.usefixtures("bad_device")
def test_repeated_failures_quarantine_the_device_and_its_readings_go_unscored() -> None:
    bucket, store = new_bucket(), MemoryStore()
    seed(bucket, store)
    bucket["devices"]["bad"] = pickle.loads(pickle.dumps(bucket["devices"]["good"]))
    for i in range(RULE.after_failures):
        out = score_bucket(bucket, batch(10 + 2 * i, 100 + 4 * i), T0, T0 + i, STRICT, store)
        assert out.failed == 1
    bad = bucket["devices"]["bad"]
    assert bad["status"] == "quarantined"
    assert bad["quarantined_until_ms"] == T0 + 2 + RULE.hold_ms
    published = states(out, "bad")
    assert len(published) == 1
    record = DeviceState.model_validate(published[0])  # the contract takes it
    assert record.status == "quarantined"
    assert record.quarantine_reason == "scoring failed: Boom: value out of its mind"

    out = score_bucket(bucket, batch(30, 200), T0, T0 + 10, STRICT, store)
    assert out.failed == 0  # not even tried
    assert out.held == 2
    assert {d.reason for d in out.dead} == {
        "device quarantined: scoring failed: Boom: value out of its mind"
    }
    assert bucket["devices"]["good"]["last_seq"] == 31


def quarantined(bucket: BucketState, store: MemoryStore, at_ms: int) -> None:
    for i in range(RULE.after_failures):
        score_bucket(bucket, batch(10 + 2 * i, 100 + 4 * i), T0, at_ms, STRICT, store)
    assert bucket["devices"]["bad"]["status"] == "quarantined"


@pytest.mark.usefixtures("bad_device")
def test_a_lift_newer_than_the_quarantine_ends_it_and_an_older_one_does_not() -> None:
    bucket, store = new_bucket(), MemoryStore()
    seed(bucket, store)
    bucket["devices"]["bad"] = pickle.loads(pickle.dumps(bucket["devices"]["good"]))
    quarantined(bucket, store, T0 + 5_000)
    older = [(lift_key("bad"), lift_value("bad", T0 + 4_999))]
    score_bucket(bucket, BucketBatch.of({}, older), T0, T0 + 6_000, STRICT, store)
    assert bucket["devices"]["bad"]["status"] == "quarantined"

    newer = [(lift_key("bad"), lift_value("bad", T0 + 7_000)), (lift_key("bad"), "not json")]
    out = score_bucket(bucket, BucketBatch.of({}, newer), T0, T0 + 7_000, STRICT, store)
    bad = bucket["devices"]["bad"]
    assert bad["status"] == "ok"
    assert bad["quarantined_until_ms"] is None
    assert bad["failures"] == 0
    assert [s["status"] for s in states(out, "bad")] == ["ok"]


@pytest.mark.usefixtures("bad_device")
def test_a_quarantine_ends_when_its_time_is_up() -> None:
    bucket, store = new_bucket(), MemoryStore()
    seed(bucket, store)
    bucket["devices"]["bad"] = pickle.loads(pickle.dumps(bucket["devices"]["good"]))
    quarantined(bucket, store, T0)
    out = score_bucket(bucket, batch(40, 300), T0, T0 + RULE.hold_ms - 1, STRICT, store)
    assert out.held == 2
    out = score_bucket(bucket, batch(42, 400), T0, T0 + RULE.hold_ms, STRICT, store)
    assert out.held == 0
    assert out.failed == 1  # tried again (and it still fails: one more count)
    assert bucket["devices"]["bad"]["failures"] == 1


def test_a_device_silent_for_expire_after_leaves_the_state_with_its_parameters() -> None:
    bucket, store = new_bucket(), MemoryStore()
    rows, texts = records("quiet", 1, 3, 0)
    score_bucket(
        bucket, BucketBatch.of({"quiet": rows}, (), {"quiet": texts}), T0 - 1, T0, STRICT, store
    )
    store.save_params("quiet", "{}", 1)
    last = bucket["devices"]["quiet"]["last_seen_ms"]
    assert last is not None

    silent_at = last + STRICT.session_gap_ms
    out = expire_bucket(bucket, silent_at, T0, STRICT, store)
    assert bucket["devices"]["quiet"]["status"] == "silent"
    assert bucket["devices"]["quiet"]["timer_ms"] == last + STRICT.expire_after_ms
    assert out.forgotten == 0

    out = expire_bucket(bucket, last + STRICT.expire_after_ms - 1, T0, STRICT, store)
    assert "quiet" in bucket["devices"]
    out = expire_bucket(bucket, last + STRICT.expire_after_ms, T0, STRICT, store)
    assert out.forgotten == 1
    assert "quiet" not in bucket["devices"]
    assert store.params("quiet") is None


def test_a_device_whose_every_reading_is_late_still_leaves_the_state() -> None:
    bucket, store = new_bucket(), MemoryStore()
    rows, texts = records("late", 1, 3, 0)  # event times T0 + 1 s to T0 + 3 s
    watermark = T0 + 60_000  # all behind it: none is scored, the device has never been seen
    batch_of_late = BucketBatch.of({"late": rows}, (), {"late": texts})
    out = score_bucket(bucket, batch_of_late, watermark, T0, STRICT, store)
    assert out.scored == 0
    held = bucket["devices"]["late"]
    assert held["last_seen_ms"] is None
    assert held["timer_ms"] == watermark + STRICT.expire_after_ms
    assert arm_timer(bucket) == watermark + STRICT.expire_after_ms
    out = expire_bucket(bucket, watermark + STRICT.expire_after_ms - 1, T0, STRICT, store)
    assert "late" in bucket["devices"]
    out = expire_bucket(bucket, watermark + STRICT.expire_after_ms, T0, STRICT, store)
    assert out.forgotten == 1
    assert "late" not in bucket["devices"]


def test_a_reading_after_silence_arms_the_session_timer_before_the_expiry_one() -> None:
    bucket, store = new_bucket(), MemoryStore()
    rows, texts = records("quiet", 1, 1, 0)
    score_bucket(
        bucket, BucketBatch.of({"quiet": rows}, (), {"quiet": texts}), T0 - 1, T0, STRICT, store
    )
    last = bucket["devices"]["quiet"]["last_seen_ms"]
    assert last is not None
    expire_bucket(bucket, last + STRICT.session_gap_ms, T0, STRICT, store)
    back = pd.DataFrame(frame([(50, last + 3_600_000, 21.0)]))
    score_bucket(bucket, BucketBatch.of({"quiet": Rows.of(back)}), last, T0, STRICT, store)
    quiet = bucket["devices"]["quiet"]
    assert quiet["status"] == "ok"
    assert quiet["timer_ms"] == last + 3_600_000 + STRICT.session_gap_ms


def test_records_that_are_not_readings_are_refused_with_a_specific_reason_and_their_place() -> None:
    good = json.dumps({"seq": 1, "event_ms": T0, "metrics": {"t": 1.0}})
    texts = [
        "{not json",
        "[1, 2]",
        json.dumps({"seq": "1", "event_ms": T0, "metrics": {}}),
        json.dumps({"seq": 2**70, "event_ms": T0, "metrics": {}}),
        json.dumps({"seq": 1, "event_ms": T0, "metrics": {"t": 1e300}}),
        json.dumps({"seq": 1, "event_ms": T0, "metrics": {}, "received_ms": 1.5}),
        good,
    ]
    sources = [(3, 100 + i) for i in range(len(texts))]
    found = readings_by_device(["d"] * len(texts), texts, sources)
    reasons = [r.reason for r in found.refused]
    assert reasons[0].startswith("not JSON: ")
    assert reasons[1:] == [
        "not a JSON object",
        "seq and event_ms must be integers and metrics an object",
        "seq or event_ms outside a signed 64-bit integer",
        "a metric value is not a number of magnitude at most 1e+15",
        "received_ms is not a signed 64-bit integer",
    ]
    assert [r.record.source for r in found.refused] == sources[:-1]
    assert found.records["d"] == [Record(good, (3, 106))]


def test_a_dead_letter_is_the_record_itself_with_the_stage_the_reason_and_its_place() -> None:
    found = readings_by_device(["d"], ["{oops"], [(2, 41)])
    topics = {role: f"topic.{role.value}" for role in Role}
    out = output_frame([], topics, found.refused, "telemetry.raw")
    row = out.set_axis(OUTPUT_COLUMNS, axis=1).iloc[0]
    assert (row["topic"], row["key"], row["value"]) == ("topic.deadletter", "d", "{oops")
    headers = dict(json.loads(row["headers"]))
    assert headers["fw.stage"] == "score"
    assert headers["fw.reason"].startswith("not JSON")
    assert (headers["fw.source_topic"], headers["fw.source_partition"]) == ("telemetry.raw", "2")
    assert headers["fw.source_offset"] == "41"
    assert json.loads(dead_letter_headers(found.refused[0], "x"))[0][0] == "fw.reason"


def test_metric_names_beyond_the_limit_are_refused_and_the_rest_of_the_reading_is_scored() -> None:
    policy = replace(STRICT, max_metrics=2)
    bucket, store = new_bucket(), MemoryStore()
    first = frame([(1, T0, 21.0)], humidity=50.0)
    texts = [Record(json.dumps({"seq": 1}), (0, 1))]
    out = score_bucket(
        bucket, BucketBatch.of({"d": Rows.of(first)}, (), {"d": texts}), T0 - 1, T0, policy, store
    )
    assert out.dead == []
    flood = frame([(2, T0 + 1000, 21.0), (3, T0 + 2000, 21.5)], humidity=50.0)
    extra = frame(
        [(3, T0 + 2000, 21.5)], 0, humidity=50.0, m0=1, m1=1, m2=1, m3=1, m4=1, m5=1, m6=1
    )
    rows = pd.concat([flood[flood["seq"] == 2], extra], ignore_index=True)
    texts = [Record(json.dumps({"seq": 2}), (0, 2)), Record(json.dumps({"seq": 3}), (0, 3))]
    out = score_bucket(
        bucket, BucketBatch.of({"d": Rows.of(rows)}, (), {"d": texts}), T0, T0, policy, store
    )
    assert [d.record.source for d in out.dead] == [(0, 3)]
    assert out.dead[0].reason == (
        "metric names beyond the 2 a device may report (score.max_metrics): m0, m1, m2, m3, m4, …"
    )
    device = bucket["devices"]["d"]
    assert device["last_seq"] == 3  # the rest of reading 3 was scored
    assert set(device["last_values"]) == {"temperature", "humidity"}


def test_the_metric_limit_holds_over_batches_of_many_readings() -> None:
    policy = replace(STRICT, max_metrics=64)
    bucket, store = new_bucket(), MemoryStore()
    refused = 0
    for b in range(4):  # 4 batches of 5 readings, 5 new names each: 100 names offered
        parts = [
            frame([(b * 5 + i, T0 + (b * 5 + i) * 1000, 21.0)], 0, **_names(b * 5 + i))
            for i in range(5)
        ]
        rows = pd.concat(parts, ignore_index=True)
        texts = [Record(json.dumps({"seq": b * 5 + i}), (0, b * 5 + i)) for i in range(5)]
        out = score_bucket(
            bucket, BucketBatch.of({"d": Rows.of(rows)}, (), {"d": texts}), T0, T0, policy, store
        )
        refused += len(out.dead)
    device = bucket["devices"]["d"]
    assert len(set(device["recent_values"]) | set(device["last_values"])) == 64
    assert refused == 8  # readings 12 (partly) to 19


def _names(seq: int) -> dict[str, float]:
    return {f"m{seq}_{j}": 1.0 for j in range(5)}
