"""The sequence numbers a device's state has seen, as sorted, disjoint ``[lowest seq, highest
seq, newest event_ms]`` ranges: how the scorer (:mod:`~fleetwatch.streaming.scorer.dedup`), the
trainer (:mod:`~fleetwatch.streaming.trainer.repeats`) — both with :func:`sort_rows` — and the
rules query (:mod:`~fleetwatch.streaming.rules.step`) tell a repeated reading from a new one.

A device whose readings come in order keeps one range. Each reading out of order, or a gap,
may add one; :data:`MOST_RANGES` bounds them, so that a device sending its numbers at random
costs a bounded search per reading, not one that grows with what it sent. Each caller drops the
ranges whose newest reading is behind its watermark (a repeat of them is late anyway).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from typing import NamedTuple

import numpy as np

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


class RowVerdicts(NamedTuple):
    """What :func:`sort_rows` makes of a device's rows (one per reading and metric): which rows
    to keep and which are late, as indices into the rows given, with the counts and ranges
    after them."""

    keep: list[int]
    """Rows of new readings within the watermark, each (reading, metric) once, in
    ``(event_ms, seq)`` order."""
    late: list[int]
    """Rows of new readings behind the watermark, in ``(event_ms, seq)`` order."""
    readings: int
    """New readings within the watermark (not rows)."""
    duplicates: int
    """Repeats: a reading seen within the lateness, and each copy of a reading in the rows
    beyond its first, counted once per reading."""
    ranges: Ranges
    """The ranges with the new readings added (a new list after a reboot), those behind the
    watermark dropped."""
    came_in_order: bool
    """Whether the rows were given in ``(event_ms, seq)`` order (then :attr:`keep` and
    :attr:`late` ascend)."""


def _in_order(evs: list[int], seqs: list[int]) -> bool:
    """Whether rows of these event times and sequence numbers are in ``(event_ms, seq)`` order
    (a device's readings mostly come so: checked in Python, cheaper than sorting them)."""
    return all(
        (e0, s0) <= (e1, s1) for e0, s0, e1, s1 in zip(evs, seqs, evs[1:], seqs[1:], strict=False)
    )


def classify(
    ranges: Ranges, seq: int, dev: int, ev: int, last_dev: int | None, watermark: int
) -> str:
    """``dup`` (``seq`` seen within the lateness, from a device clock no later than the newest
    reading's ``last_dev``), ``late`` (behind the watermark) or ``keep``."""
    if find(ranges, seq) is not None and (last_dev is None or dev <= last_dev):
        return "dup"
    return "late" if ev < watermark else "keep"


def sort_rows(
    ranges: Ranges,
    last_dev: int | None,
    seqs: list[int],
    devs: list[int],
    evs: list[int],
    metrics: list[str],
    watermark_ms: int,
) -> RowVerdicts:
    """A device's rows, one per reading and metric — a reading is ``(seq, device clock)`` —
    taken in ``(event_ms, seq)`` order (a stable sort, when they come otherwise) and sorted out
    against the ``ranges`` it has seen and the newest device clock ``last_dev`` of its
    readings: repeats dropped, readings behind the watermark set apart, the new ones added to
    the ranges. The same ``seq`` with a later device clock is a reboot: a new epoch of numbers,
    and the ranges start again. ``ranges`` is changed in place, unless a reboot starts a new
    list (the one returned is the truth)."""
    order = None
    if not _in_order(evs, seqs):
        order = np.lexsort((seqs, evs)).tolist()
        seqs, devs = [seqs[i] for i in order], [devs[i] for i in order]
        evs, metrics = [evs[i] for i in order], [metrics[i] for i in order]
    keep: list[int] = []
    late: list[int] = []
    verdict: dict[tuple[int, int], str] = {}
    taken: set[tuple[int, int, str]] = set()
    duplicates = 0
    for i, (seq, dev, ev, metric) in enumerate(zip(seqs, devs, evs, metrics, strict=True)):
        key = (seq, dev)
        if (seq, dev, metric) in taken:
            continue  # a repeat inside these rows (counted with its reading below)
        taken.add((seq, dev, metric))
        kind = verdict.get(key)
        if kind is None:
            kind = classify(ranges, seq, dev, ev, last_dev, watermark_ms)
            verdict[key] = kind
            if kind == "dup":
                duplicates += 1
            elif kind == "keep":
                if find(ranges, seq) is not None:  # the same seq after a reboot: a new epoch
                    ranges = []
                add(ranges, seq, ev)
                last_dev = dev if last_dev is None else max(last_dev, dev)
        if kind == "keep":
            keep.append(i)
        elif kind == "late":
            late.append(i)
    if len(taken) < len(seqs):  # repeats inside the rows: copies of a reading beyond the first
        rows = Counter(zip(seqs, devs, strict=True))
        distinct = Counter((s, d) for s, d, _ in taken)
        duplicates += sum(rows[k] // distinct[k] - 1 for k in rows)
    readings = sum(1 for kind in verdict.values() if kind == "keep")
    kept = [r for r in ranges if r[2] >= watermark_ms]
    if order is not None:
        keep, late = [order[i] for i in keep], [order[i] for i in late]
    return RowVerdicts(keep, late, readings, duplicates, kept, order is None)
