"""The scorer's sorting out of a device's readings against the numbers its state has seen:
repeats dropped, and a device that numbers its readings at random keeps a bounded state."""

from __future__ import annotations

import random

import numpy as np

from fleetwatch.streaming import seen
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
