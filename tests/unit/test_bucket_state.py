"""A bucket's state value (MessagePack, pickled when it cannot be) and the buckets a worker
keeps warm: the state taken from a value is the state that value holds, whichever path."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fleetwatch.streaming.scorer import bucket_state
from fleetwatch.streaming.scorer.bucket_state import MSGPACK, PICKLE, WarmBuckets, decode, encode
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
from fleetwatch.streaming.scorer.errors import BucketStateError
from fleetwatch.streaming.scorer.output import Role
from fleetwatch.streaming.scorer.readings import Rows
from tests.unit.test_device_scoring import POLICY, T0, frame, json_types_only


def batches() -> list[BucketBatch]:
    """Three devices over 12 batches: steady readings, a spike, a repeat, one falls silent."""
    out = []
    for i in range(12):
        t = T0 + i * 1000
        readings = {"d1": frame([(i, t, 21.0 + (15.0 if i == 6 else 0.1 * i))], humidity=40.0)}
        if i < 5:
            readings["d2"] = frame([(i, t + 300, 22.0)])
        if i % 3 == 0:
            readings["d3"] = frame([(i, t, 20.5), (i, t, 20.5)])
        out.append(BucketBatch({k: Rows.of(v) for k, v in readings.items()}))
    return out


def step(bucket: BucketState, batch: BucketBatch, i: int, store: MemoryStore) -> BucketOutput:
    now = T0 + i * 1000
    out = score_bucket(bucket, batch, now - 60_000, now, POLICY, store)
    arm_timer(bucket)
    return out


def scored_bucket() -> BucketState:
    bucket, store = new_bucket(), MemoryStore()
    for i, batch in enumerate(batches()):
        step(bucket, batch, i, store)
    return bucket


def test_a_scored_bucket_is_messagepack_and_comes_back_exactly() -> None:
    bucket = scored_bucket()
    assert json_types_only(bucket) == []
    value = encode(bucket)
    assert value[:1] == MSGPACK
    assert decode(value) == bucket
    assert encode(decode(value)) == value


def shared(value: Any, seen: dict[int, int] | None = None) -> list[Any]:
    """The lists and dicts reachable more than once in ``value``: in memory a change to one is
    a change to the other, decoded they are two."""
    seen = {} if seen is None else seen
    if not isinstance(value, list | dict):
        return []
    if id(value) in seen:
        return [value]
    seen[id(value)] = 1
    items = value.values() if isinstance(value, dict) else value
    return [s for v in items for s in shared(v, seen)]


def test_a_scored_bucket_shares_no_list_or_dict_between_two_places() -> None:
    assert shared(scored_bucket()) == []


def test_nan_infinities_and_negative_zero_come_back_as_they_were() -> None:
    state = new_state()
    state["recent_values"] = {"t": [math.nan, math.inf, -math.inf, -0.0, 1e-310]}
    bucket: BucketState = {"devices": {"d": state}, "timer_ms": None, "fleet": {}}
    back = decode(encode(bucket))["devices"]["d"]["recent_values"]["t"]
    assert math.isnan(back[0])
    assert back[1:3] == [math.inf, -math.inf]
    assert math.copysign(1.0, back[3]) == -1.0
    assert back[4] == 1e-310


@pytest.mark.parametrize(
    "odd",
    ["\ud800", 2**70, np.float64(1.5)],
    ids=["a string that is not UTF-8", "an integer beyond 64 bits", "a numpy number"],
)
def test_what_messagepack_cannot_hold_is_pickled_and_kept(odd: Any) -> None:
    state = new_state()
    state["firmware"] = odd
    bucket: BucketState = {"devices": {"d": state}, "timer_ms": None, "fleet": {}}
    value = encode(bucket)
    assert value[:1] == PICKLE
    assert decode(value) == bucket


def test_a_value_of_no_known_encoding_is_refused() -> None:
    with pytest.raises(BucketStateError, match="unknown encoding"):
        decode(b"x" + b"\x80")


def test_the_state_kept_is_handed_back_only_for_the_value_it_was_written_as() -> None:
    warm, bucket = WarmBuckets(), scored_bucket()
    value = encode(bucket)
    warm.keep(3, value, bucket)
    assert warm.take(3, bytes(value)) is bucket  # the same value, read back from the store
    assert len(warm) == 0  # taken: a step that fails half-way never hands it out again
    again = warm.take(3, value)
    assert again is not bucket
    assert again == bucket
    warm.keep(3, value, bucket)
    older = encode(new_bucket())  # a retried batch: the store holds the value before it
    assert warm.take(3, older) == new_bucket()


def test_a_worker_keeping_its_buckets_scores_as_one_that_decodes_every_value() -> None:
    """Exactly-once and replay: the state kept is the state its value holds, so what a warm
    worker emits and writes is what a worker decoding each value (after a restart) does."""
    runs: list[tuple[list[Any], list[bytes]]] = []
    for kept in (True, False):
        warm, store = WarmBuckets(), MemoryStore()
        value: bytes | None = None
        records: list[Any] = []
        values: list[bytes] = []
        for i, batch in enumerate(batches()):
            bucket = new_bucket() if value is None else warm.take(0, value)
            out = step(bucket, batch, i, store)
            assert shared(bucket) == []
            value = encode(bucket)
            if kept:
                warm.keep(0, value, bucket)
            records.append((out.records, out.tombstones, out.late, out.duplicates, out.scored))
            values.append(value)
        assert value is not None
        bucket = warm.take(0, value)
        out = expire_bucket(bucket, T0 + 10**7, T0 + 10**7, POLICY, store)
        records.append((out.records, out.tombstones, out.forgotten))
        values.append(encode(bucket))
        runs.append((records, values))
    assert runs[0] == runs[1]
    assert any(role == Role.ALERTS for batch in runs[0][0] for _, role, _ in batch[0])


def test_the_warm_buckets_are_the_modules_so_every_task_of_a_worker_finds_them() -> None:
    from fleetwatch.streaming.scorer import processor

    assert processor.warm_buckets() is processor.warm_buckets()
    assert isinstance(processor.warm_buckets(), bucket_state.WarmBuckets)
