"""The trainer learns each reading once: a repeat (the same sequence number and device clock,
in the same batch or a later one) is not learned again, a reading behind the watermark is not
learned, and the same sequence number from a later device clock (a reboot) is a new reading."""

from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
from pyspark.sql.streaming.tws_tester import TwsTester

from fleetwatch.models.batch import Batch
from fleetwatch.streaming.trainer.device_rows import DeviceRows
from fleetwatch.streaming.trainer.processor import _bucket_trainer, new_batches
from fleetwatch.streaming.trainer.repeats import RepeatState, new_readings
from fleetwatch.streaming.trainer.seen_state import decode_seen, encode_seen, new_seen

T0 = 1_763_700_000_000
MINUTE = 60_000
EXPIRE = 30 * 86_400_000


def rows(
    seqs: list[int], clocks: list[int] | None = None, event_ms: list[int] | None = None
) -> DeviceRows:
    """Readings of two metrics each, a minute apart by sequence number unless given, their
    values a function of the sequence number."""
    evs = event_ms if event_ms is not None else [T0 + s * MINUTE for s in seqs]
    devs = clocks if clocks is not None else evs
    n = len(seqs)
    return DeviceRows(
        np.repeat(np.asarray(seqs, np.int64), 2),
        np.repeat(np.asarray(devs, np.int64), 2),
        np.repeat(np.asarray(evs, np.int64), 2),
        np.asarray(["t", "h"] * n, dtype=object),
        np.column_stack([20 + np.sin(seqs), 50 + np.cos(seqs)]).ravel(),
    )


def test_a_batch_of_new_readings_is_learned_whole_in_the_order_it_came() -> None:
    given = rows([3, 1, 2])
    batch, held = new_readings(given, None, 0)
    want = given.batch()
    np.testing.assert_array_equal(batch.event_ms, want.event_ms)
    np.testing.assert_array_equal(batch.value, want.value)
    assert held == RepeatState(T0 + 3 * MINUTE, [[1, 3, T0 + 3 * MINUTE]])


def test_repeats_in_the_batch_and_of_an_earlier_batch_are_dropped() -> None:
    _, held = new_readings(rows([1, 2]), None, 0)
    batch, held = new_readings(rows([2, 3, 3, 4]), held, 0)
    assert sorted(set(batch.event_ms.tolist())) == [T0 + 3 * MINUTE, T0 + 4 * MINUTE]
    assert len(batch) == 4  # readings 3 and 4, two metrics each
    assert held.ranges == [[1, 4, T0 + 4 * MINUTE]]


def test_a_reading_behind_the_watermark_is_not_learned() -> None:
    watermark = T0 + 2 * MINUTE
    batch, held = new_readings(rows([1, 2, 3]), None, watermark)
    assert sorted(set(batch.event_ms.tolist())) == [T0 + 2 * MINUTE, T0 + 3 * MINUTE]
    assert held.ranges == [[2, 3, T0 + 3 * MINUTE]]


def test_the_same_numbers_from_a_later_device_clock_are_a_reboot_and_learned() -> None:
    _, held = new_readings(rows([1, 2]), None, 0)
    later = [T0 + 60 * MINUTE, T0 + 61 * MINUTE]
    batch, held = new_readings(rows([1, 2], clocks=later, event_ms=later), held, 0)
    assert len(batch) == 4
    assert held.last_device_ms == later[1]


def packed(seqs: list[int]) -> pd.DataFrame:
    r = rows(seqs)
    return pd.DataFrame(
        {
            "device_id": ["d"],
            "seq": [r.seq],
            "device_ms": [r.device_ms],
            "event_ms": [r.event_ms],
            "metric": [r.metric],
            "value": [r.value],
        }
    )


def trainer() -> TwsTester:
    return TwsTester(
        _bucket_trainer(EXPIRE),
        timeMode="EventTime",
        eventTimeExtractor=lambda row: int(max(row["event_ms"])),
    )


def params_of(tester: TwsTester) -> dict[str, object]:
    held = tester.peekValueState("params", 3)
    assert held is not None
    return dict(json.loads(json.loads(held[0])["d"]))


def test_the_processor_learns_a_repeated_reading_once() -> None:
    once, twice = trainer(), trainer()
    once.testInPandas(3, packed(list(range(40))))
    twice.testInPandas(3, pd.concat([packed(list(range(40))), packed([5, 6, 7])]))
    once.testInPandas(3, packed(list(range(40, 50))))
    repeated = twice.testInPandas(3, packed(list(range(35, 50))))  # 35..39 again
    assert list(repeated["version"]) == [2]
    assert params_of(twice) == params_of(once)
    again = twice.testInPandas(3, packed([45, 46]))  # nothing new: nothing published
    assert again is None or again.empty
    assert params_of(twice) == params_of(once)


def test_the_clock_kept_is_the_newest_readings_as_the_scorer_keeps_it() -> None:
    _, held = new_readings(rows([5, 6]), None, 0)
    old = rows([2], clocks=[T0 + 90 * MINUTE])  # an older reading, its clock far ahead
    batch, held = new_readings(old, held, 0, last_ms=T0 + 6 * MINUTE)
    assert len(batch) == 2
    assert held.last_device_ms == T0 + 6 * MINUTE


def packed_chunk(device_id: str, seqs: list[int]) -> pd.DataFrame:
    chunk = packed(seqs)
    chunk["device_id"] = [device_id]
    return chunk


def test_a_device_with_nothing_new_that_the_bucket_does_not_know_leaves_no_state() -> None:
    seen = new_seen()
    watermark = T0 + 100 * MINUTE
    assert new_batches(seen, [packed_chunk("late", [1, 2])], watermark) == []
    assert seen["seqs"] == {}
    (learned,) = new_batches(seen, [packed_chunk("live", [200])], watermark)
    assert learned[0] == "live"
    assert set(seen["seqs"]) == {"live"}


def test_rows_out_of_order_are_learned_as_the_same_rows_in_order_in_the_order_they_came() -> None:
    rng = random.Random(13)
    held_shuffled = held_in_order = None
    for step in range(200):
        seqs = [10 * step + rng.randrange(-30, 10) for _ in range(rng.randrange(2, 10))]
        given, ordered = rows(seqs), rows(sorted(seqs))
        watermark = T0 + (10 * step - 20) * MINUTE
        got, held_shuffled = new_readings(given, held_shuffled, watermark)
        want, held_in_order = new_readings(ordered, held_in_order, watermark)
        assert held_shuffled == held_in_order, step
        learned = as_given(got)
        assert sorted(learned) == sorted(as_given(want))
        entries = (given.event_ms.tolist(), given.metric.tolist(), given.value.tolist())
        it = iter(zip(*entries, strict=True))
        assert all(entry in it for entry in learned), step  # in the order they came


def as_given(batch: Batch) -> list[tuple[int, str, float]]:
    """A batch's entries in the order its rows were given."""
    rows = list(range(len(batch))) if batch.order is None else np.argsort(batch.order).tolist()
    names = [batch.names[c] for c in batch.codes.tolist()]
    evs, values = batch.event_ms.tolist(), batch.value.tolist()
    return [(evs[i], names[i], values[i]) for i in rows]


STATE_VALUE = (
    '{"devices":{"a":7,"b":5},"seqs":{"a":[1763700000000,[[0,0,10],[2,9,1763700000000]]],'
    '"b":[null,[[1,3,300]]]},"timer_ms":99}'
)
"""A bucket's ``seen`` state value as the trainer writes it (checkpoints hold this format)."""


def test_a_bucket_state_value_reads_and_writes_back_byte_for_byte() -> None:
    seen = decode_seen(STATE_VALUE)
    assert seen["seqs"]["b"] == RepeatState(None, [[1, 3, 300]])
    assert encode_seen(seen) == STATE_VALUE
    batch, after = new_readings(rows([10, 11]), seen["seqs"]["a"], 0)
    assert len(batch) == 4
    assert after.ranges == [[0, 0, 10], [2, 11, T0 + 11 * MINUTE]]
