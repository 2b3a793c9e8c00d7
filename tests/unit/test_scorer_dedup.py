"""The scorer's sorting out of a device's readings against the numbers its state has seen:
repeats dropped, and a device that numbers its readings at random keeps a bounded state."""

from __future__ import annotations

import random

import numpy as np
import pytest

from fleetwatch.streaming import seen
from fleetwatch.streaming.scorer import dedup
from fleetwatch.streaming.scorer.dedup import sort_out
from fleetwatch.streaming.scorer.device_state import new_state
from fleetwatch.streaming.scorer.output import Output
from fleetwatch.streaming.scorer.readings import Rows

T0 = 1_763_700_000_000


def rows(seqs: list[int], start_ms: int) -> Rows:
    n = len(seqs)
    times = np.arange(start_ms, start_ms + n, dtype=np.int64)
    return Rows(
        {
            "seq": np.array(seqs, dtype=np.int64),
            "event_ms": times,
            "device_event_ms": times,
            "metric": np.array(["t"] * n, dtype=object),
        }
    )


def test_repeats_are_dropped_and_new_readings_kept() -> None:
    st = new_state()
    first = Output()
    assert sort_out(st, rows([1, 2, 3], T0), T0, first).kept is not None
    assert (first.scored, first.duplicates) == (3, 0)
    again = Output()
    sort_out(st, rows([2, 4], T0 + 3), T0, again)
    assert (again.scored, again.duplicates) == (1, 1)
    assert st["seen_seqs"] == [[1, 4, T0 + 4]]


def test_a_device_numbering_its_readings_at_random_keeps_a_bounded_state() -> None:
    st = new_state()
    numbers = random.Random(5).sample(range(10**9), 20_000)
    out = Output()
    sorted_out = sort_out(st, rows(numbers, T0), T0, out)
    assert out.scored == 20_000
    assert sorted_out.kept is not None
    assert len(sorted_out.kept) == 20_000
    assert len(st["seen_seqs"]) == seen.MOST_RANGES


def _reading_rows(seq: int, event_ms: int, device_ms: int, metrics: list[str]) -> Rows:
    n = len(metrics)
    return Rows(
        {
            "seq": np.full(n, seq, dtype=np.int64),
            "event_ms": np.full(n, event_ms, dtype=np.int64),
            "device_event_ms": np.full(n, device_ms, dtype=np.int64),
            "metric": np.array(metrics, dtype=object),
        }
    )


def _same_rows(a: Rows | None, b: Rows | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.cols.keys() == b.cols.keys() and all(np.array_equal(a[c], b[c]) for c in a.cols)


def test_one_readings_batch_is_sorted_out_as_any_batch_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of one reading takes a shorter way through :func:`sort_out`: the same verdicts,
    counts, state and rows as the way of every batch, over repeats, reboots, late and
    out-of-order readings."""
    rng = random.Random(71)
    fast, slow = new_state(), new_state()
    for step in range(3_000):
        seq = rng.choice([step, step, step - rng.randrange(1, 30), rng.randrange(0, 5)])
        event_ms = T0 + 1_000 * (seq if rng.random() < 0.9 else rng.randrange(0, step + 1))
        device_ms = event_ms + rng.choice([0, 0, 0, 5_000_000])  # a reboot now and then
        metrics = rng.choice([["t"], ["t", "h"], ["h", "t", "p"]])
        watermark = T0 + 1_000 * max(0, step - rng.randrange(5, 60))
        given = _reading_rows(seq, event_ms, device_ms, metrics)
        fast_out, slow_out = Output(), Output()
        got = sort_out(fast, given, watermark, fast_out)
        with monkeypatch.context() as m:
            m.setattr(dedup, "_one_reading", lambda *_: False)
            want = sort_out(slow, given, watermark, slow_out)
        assert fast == slow
        assert (fast_out.scored, fast_out.duplicates) == (slow_out.scored, slow_out.duplicates)
        for field in ("kept", "late", "in_order", "older"):
            assert _same_rows(getattr(got, field), getattr(want, field)), (step, field)
        fast["last_seen_ms"] = slow["last_seen_ms"] = max(
            int(slow["last_seen_ms"] or 0), event_ms if got.in_order is not None else 0
        )
        fast["last_device_ms"] = slow["last_device_ms"] = device_ms


def test_rows_out_of_order_are_sorted_out_as_the_same_rows_in_order() -> None:
    """Rows that come out of ``(event_ms, seq)`` order are sorted out as those rows in that
    order are: the same verdicts, counts, state, and rows kept and set apart, in that order."""
    rng = random.Random(29)
    shuffled, in_order = new_state(), new_state()
    for step in range(300):
        base = 10 * step
        seqs = [base + rng.randrange(-40, 10) for _ in range(rng.randrange(2, 12))]
        seqs += rng.sample(seqs, rng.randrange(0, 3))  # repeats inside the batch
        n = len(seqs)
        reboot = 5_000_000 if rng.random() < 0.05 else 0
        given = Rows(
            {
                "seq": np.array(seqs, dtype=np.int64),
                "event_ms": np.array([T0 + 1_000 * s for s in seqs], dtype=np.int64),
                "device_event_ms": np.array([T0 + 1_000 * s + reboot for s in seqs], np.int64),
                "metric": np.array([rng.choice(["t", "h"]) for _ in range(n)], dtype=object),
            }
        )
        ordered = given.take(np.lexsort((given["seq"], given["event_ms"])))
        watermark = T0 + 1_000 * (base - rng.randrange(5, 30))
        got_out, want_out = Output(), Output()
        got = sort_out(shuffled, given, watermark, got_out)
        want = sort_out(in_order, ordered, watermark, want_out)
        assert shuffled == in_order, step
        assert (got_out.scored, got_out.duplicates) == (want_out.scored, want_out.duplicates)
        for field in ("kept", "late", "in_order", "older"):
            assert _same_rows(getattr(got, field), getattr(want, field)), (step, field)
        if got.in_order is not None and len(got.in_order):
            newest = int(got.in_order["event_ms"][-1])
            for st in (shuffled, in_order):
                st["last_seen_ms"] = max(int(st["last_seen_ms"] or 0), newest)
                st["last_device_ms"] = int(got.in_order["device_event_ms"][-1])
