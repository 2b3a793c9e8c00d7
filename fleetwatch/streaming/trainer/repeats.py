"""Which of a device's readings the trainer learns: the new ones within the watermark.

The raw log is at-least-once (an MQTT redelivery, a device resend, a gateway restart can repeat
a reading), so a reading may come again. The trainer tells a repeat from a new reading as the
scorer does (:func:`fleetwatch.streaming.seen.sort_rows`): per device, the ranges of sequence
numbers seen within its lateness (``score.dedup_window``) and the device clock of its newest
reading (:class:`RepeatState`), kept in the bucket's state beside when the device was last heard
(:mod:`~fleetwatch.streaming.trainer.seen_state`).
A reading behind the watermark is not learned. Kept per device, this costs a few numbers a
device, where a de-duplication keyed by reading would keep a key per reading for the whole
lateness (30 minutes of a fleet's readings).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from fleetwatch.models.batch import Batch
from fleetwatch.streaming import seen
from fleetwatch.streaming.trainer.device_rows import DeviceRows


class RepeatState(NamedTuple):
    """What the trainer keeps of a device to tell its repeats apart."""

    last_device_ms: int | None
    """The device clock of its newest reading (``None``: not known yet)."""
    ranges: seen.Ranges
    """The sequence numbers it sent within the lateness (:mod:`fleetwatch.streaming.seen`)."""

    def to_json(self) -> list[Any]:
        """As the bucket's state value holds it: ``[last_device_ms, ranges]``."""
        return [self.last_device_ms, self.ranges]

    @classmethod
    def from_json(cls, held: list[Any]) -> RepeatState:
        """The inverse of :meth:`to_json`."""
        return cls(held[0], held[1])


def new_readings(
    rows: DeviceRows, held: RepeatState | None, watermark_ms: int, last_ms: int | None = None
) -> tuple[Batch, RepeatState]:
    """The device's new readings within the watermark as a batch (entries in the order they
    came), and what the device's state holds after them. ``last_ms`` is the newest event time
    heard of the device before: as the scorer does, the device clock kept is that of its newest
    reading, when it is no older than that."""
    clock, ranges = (None, []) if held is None else held
    seqs, evs, devs = rows.seq.tolist(), rows.event_ms.tolist(), rows.device_ms.tolist()
    out = seen.sort_rows(ranges, clock, seqs, devs, evs, rows.metric.tolist(), watermark_ms)
    if out.keep:
        newest = out.keep[-1]  # rows kept in (event_ms, seq) order
        if last_ms is None or evs[newest] >= last_ms:
            clock = devs[newest]
    after = RepeatState(clock, out.ranges)
    if len(out.keep) == len(seqs):
        return rows.batch(), after
    taken = np.asarray(out.keep, dtype=np.intp)
    if not out.came_in_order:
        taken = np.sort(taken)  # the entries in the order they came
    return rows.batch(taken), after
