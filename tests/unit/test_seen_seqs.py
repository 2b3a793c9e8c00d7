"""The ranges of sequence numbers a device's state has seen: what they answer matches the set
of numbers added, they stay sorted and disjoint, and a device that sends its numbers at random
cannot grow them past their bound (so each reading costs a bounded search and insertion)."""

from __future__ import annotations

import itertools
import random

from fleetwatch.streaming import seen


def check(ranges: seen.Ranges) -> None:
    for a, b in itertools.pairwise(ranges):
        assert a[0] <= a[1] < b[0] - 1, (a, b)  # sorted, disjoint, not touching


def test_the_ranges_answer_as_the_set_of_numbers_added() -> None:
    rng = random.Random(7)
    ranges: seen.Ranges = []
    added: set[int] = set()
    for n in range(3_000):
        seq = rng.randrange(0, 400)
        seen.add(ranges, seq, n)
        added.add(seq)
        check(ranges)
    assert len(ranges) < seen.MOST_RANGES  # 400 numbers cannot make more ranges than that
    for seq in range(-5, 410):
        held = seen.find(ranges, seq)
        assert (held is not None) == (seq in added), seq
    assert [r[:2] for r in ranges] == _runs(sorted(added))


def test_a_range_keeps_its_newest_event_time_through_merges() -> None:
    ranges: seen.Ranges = []
    seen.add(ranges, 1, 100)
    seen.add(ranges, 3, 300)
    seen.add(ranges, 2, 50)
    assert ranges == [[1, 3, 300]]
    seen.add(ranges, 0, 10)
    assert ranges == [[0, 3, 300]]


def test_numbers_at_random_keep_the_ranges_bounded_and_each_reading_cheap() -> None:
    rng = random.Random(3)
    ranges: seen.Ranges = []
    for n in range(100_000):
        seq = rng.randrange(0, 2**40)
        seen.add(ranges, seq, n)
        assert seen.find(ranges, seq) is not None or seq < ranges[0][0]
    assert len(ranges) == seen.MOST_RANGES
    check(ranges)
    # a device counting up again after that keeps its latest numbers
    for n in range(1_000):
        seen.add(ranges, 2**41 + n, n)
    assert ranges[-1] == [2**41, 2**41 + 999, 999]
    assert len(ranges) == seen.MOST_RANGES


def _runs(values: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for v in values:
        if out and v == out[-1][1] + 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return out
