"""Which of a device's readings in a micro-batch are new: repeats are dropped, readings behind
the watermark are set apart, and the new ones are split by whether they come after the newest
reading already seen.

The raw log is at-least-once, so a reading may come again: within the allowed lateness the
device's state keeps the ``[lowest seq, highest seq, newest event_ms]`` ranges of the sequence
numbers it has seen (``seen_seqs``), and a reading whose sequence number is in them, with a
device clock no later than the newest reading's, is a repeat. The same sequence number with a
later device clock is a reboot: a new epoch of numbers, and the ranges start again. A row per
(reading, metric) means a reading repeated inside one batch comes as several copies of its rows;
each copy beyond the first counts as one repeat.
"""

from __future__ import annotations

from typing import NamedTuple

from fleetwatch.streaming import seen
from fleetwatch.streaming.scorer.device_state import DeviceScoringState
from fleetwatch.streaming.scorer.output import Output
from fleetwatch.streaming.scorer.readings import Rows


class Sorted(NamedTuple):
    """A device's readings of one batch, in ``(event_ms, seq)`` order, sorted out: the rows
    that :func:`~fleetwatch.streaming.seen.sort_rows`' verdicts pick (a named tuple: one is made
    per device and batch)."""

    kept: Rows | None
    """The new readings within the watermark: scored (``None``: none)."""
    late: Rows | None
    """The readings behind the watermark: not scored (``None``: none)."""
    in_order: Rows | None
    """Of :attr:`kept`, those no older than the newest reading seen before the batch."""
    older: Rows | None
    """Of :attr:`kept`, those older than it: out of order, within the allowed lateness."""


def sort_out(st: DeviceScoringState, given: Rows, watermark_ms: int, out: Output) -> Sorted:
    """Sort out ``given`` (one row per reading and metric) against the sequence numbers the
    device's state has seen, and record the new ones in it. Repeats are counted in ``out`` and
    the state, and dropped; ``out.scored`` is the number of new readings within the watermark."""
    seqs = given["seq"].tolist()
    evs = given["event_ms"].tolist()
    if len(seqs) == 1 or _one_reading(seqs, evs, given):
        return _sort_out_one(st, given, seqs[0], evs[0], watermark_ms, out)
    verdicts = seen.sort_rows(
        st["seen_seqs"],
        st["last_device_ms"],
        seqs,
        given["device_event_ms"].tolist(),
        evs,
        given["metric"].tolist(),
        watermark_ms,
    )
    out.duplicates += verdicts.duplicates
    st["seen_seqs"] = verdicts.ranges
    st["duplicate_readings"] = int(st["duplicate_readings"]) + out.duplicates
    out.scored = verdicts.readings
    keep_rows, late_rows = verdicts.keep, verdicts.late
    late = given.take(late_rows) if late_rows else None
    if not keep_rows:
        return Sorted(None, late, None, None)
    whole = verdicts.came_in_order and len(keep_rows) == len(given)
    kept = given if whole else given.take(keep_rows)
    last_ms = st["last_seen_ms"]
    if last_ms is None or int(kept["event_ms"][0]) >= last_ms:
        return Sorted(kept, late, kept, None)
    in_order = kept.where(kept["event_ms"] >= last_ms)
    return Sorted(kept, late, in_order, kept.where(kept["event_ms"] < last_ms))


def _one_reading(seqs: list[int], evs: list[int], given: Rows) -> bool:
    """Whether the rows are one reading's, once each: one sequence number, event time and
    device clock, and each metric in one row (a device's batch mostly is)."""
    n = len(seqs)
    if n <= 1:
        return n == 1
    if seqs.count(seqs[0]) != n or evs.count(evs[0]) != n:
        return False
    devs = given["device_event_ms"].tolist()
    return devs.count(devs[0]) == n and len(set(given["metric"].tolist())) == n


def _sort_out_one(
    st: DeviceScoringState, given: Rows, seq: int, ev: int, watermark_ms: int, out: Output
) -> Sorted:
    """:func:`sort_out` of the rows of one reading (:func:`_one_reading`): what its loop does
    for them, without a row's bookkeeping."""
    ranges: seen.Ranges = st["seen_seqs"]
    dev = given["device_event_ms"].item(0)
    last_dev = st["last_device_ms"]
    known = seen.find(ranges, seq) is not None
    if known and (last_dev is None or dev <= last_dev):  # as seen.classify says
        kind = "dup"
        out.duplicates += 1
    else:
        kind = "late" if ev < watermark_ms else "keep"
    if kind == "keep":
        if known:  # the same seq after a reboot: a new epoch
            ranges = []
        seen.add(ranges, seq, ev)
    st["seen_seqs"] = [r for r in ranges if r[2] >= watermark_ms]
    st["duplicate_readings"] = int(st["duplicate_readings"]) + out.duplicates
    out.scored = 1 if kind == "keep" else 0
    if kind != "keep":
        late = given.take(list(range(len(given)))) if kind == "late" else None
        return Sorted(None, late, None, None)
    last_ms = st["last_seen_ms"]
    if last_ms is None or ev >= last_ms:
        return Sorted(given, None, given, None)
    return Sorted(
        given,
        None,
        given.where(given["event_ms"] >= last_ms),
        given.where(given["event_ms"] < last_ms),
    )
