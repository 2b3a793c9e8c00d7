"""Which of a device's readings the trainer learns: the new ones within the watermark.

The raw log is at-least-once (an MQTT redelivery, a device resend, a gateway restart can repeat
a reading), so a reading may come again. The trainer tells a repeat from a new reading as the
scorer does (:func:`fleetwatch.streaming.seen.sort_rows`): per device, the ranges of sequence
numbers seen within its lateness (``score.dedup_window``) and the device clock of its newest
reading, kept in the bucket's state beside when the device was last heard
(:mod:`~fleetwatch.streaming.trainer.expiry`).
A reading behind the watermark is not learned. Kept per device, this costs a few numbers a
device, where a de-duplication keyed by reading would keep a key per reading for the whole
lateness (30 minutes of a fleet's readings).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetwatch.models.batch import Batch
from fleetwatch.streaming import seen
from fleetwatch.streaming.trainer.packing import DeviceRows

Held = list[Any]
"""A device's ``[newest device clock (ms) or None, ranges]`` (JSON in the bucket's state)."""


def new_readings(
    rows: DeviceRows, held: Held | None, watermark_ms: int, last_ms: int | None = None
) -> tuple[Batch, Held]:
    """The device's new readings within the watermark as a batch (entries in the order they
    came), and what the device's state holds after them. ``last_ms`` is the newest event time
    heard of the device before: as the scorer does, the device clock kept is that of its newest
    reading, when it is no older than that."""
    clock, ranges = (None, []) if held is None else (held[0], held[1])
    seqs, evs = rows.seq.tolist(), rows.event_ms.tolist()
    devs, metrics = rows.device_ms.tolist(), rows.metric.tolist()
    order = None
    if not seen.in_order(evs, seqs):
        order = np.lexsort((rows.seq, rows.event_ms))
        seqs, evs = [seqs[i] for i in order], [evs[i] for i in order]
        devs, metrics = [devs[i] for i in order], [metrics[i] for i in order]
    out = seen.sort_rows(ranges, clock, seqs, devs, evs, metrics, watermark_ms)
    if out.keep:
        newest = out.keep[-1]  # rows in (event_ms, seq) order
        if last_ms is None or evs[newest] >= last_ms:
            clock = devs[newest]
    kept = (clock, out.ranges)
    if len(out.keep) == len(seqs):
        return rows.batch(), list(kept)
    taken = np.asarray(out.keep, dtype=np.intp)
    if order is not None:
        taken = np.sort(order[taken])
    return rows.batch(taken), list(kept)
