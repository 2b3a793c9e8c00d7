"""The sequence numbers a device's state has seen, as sorted, disjoint ``[lowest seq, highest
seq, newest event_ms]`` ranges: how the scorer (:mod:`~fleetwatch.streaming.scorer.dedup`) and
the rules query (:mod:`~fleetwatch.streaming.rules.step`) tell a repeated reading from a new one.

A device whose readings come in order keeps one range. Each reading out of order, or a gap,
may add one; :data:`MOST_RANGES` bounds them, so that a device sending its numbers at random
costs a bounded search per reading, not one that grows with what it sent. Each caller drops the
ranges whose newest reading is behind its watermark (a repeat of them is late anyway).
"""

from __future__ import annotations

from bisect import bisect_right

Ranges = list[list[int]]

MOST_RANGES = 512
"""Ranges kept per device. Past it, the range of the lowest numbers is forgotten (a device's
numbers grow with time: those are its oldest readings), and a repeat of them is taken as new.
In-order readings need one range; at this bound a search is nine comparisons and an insertion
moves at most this many references, microseconds either way."""


def _lows(r: list[int]) -> int:
    return r[0]


def find(ranges: Ranges, seq: int) -> list[int] | None:
    """The range holding ``seq``, if one does."""
    i = bisect_right(ranges, seq, key=_lows) - 1
    if i >= 0 and ranges[i][1] >= seq:
        return ranges[i]
    return None


def add(ranges: Ranges, seq: int, event_ms: int) -> None:
    """Record ``seq`` (read at ``event_ms``), merging ranges that come to touch."""
    i = bisect_right(ranges, seq, key=_lows) - 1
    if i >= 0 and seq <= ranges[i][1] + 1:
        r = ranges[i]
        r[1], r[2] = max(r[1], seq), max(r[2], event_ms)
        if i + 1 < len(ranges) and ranges[i + 1][0] <= r[1] + 1:
            after = ranges.pop(i + 1)
            r[1], r[2] = max(r[1], after[1]), max(r[2], after[2])
        return
    if i + 1 < len(ranges) and ranges[i + 1][0] == seq + 1:
        r = ranges[i + 1]
        r[0], r[2] = seq, max(r[2], event_ms)
        return
    ranges.insert(i + 1, [seq, seq, event_ms])
    if len(ranges) > MOST_RANGES:
        del ranges[0]
