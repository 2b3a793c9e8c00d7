"""The fleet's tails of the level member's statistic: what a young device's stream is held to
until its own excursions can set its threshold.

A stream's threshold is where its own excursion peaks pass at the budget's rate
(:class:`~fleetwatch.models.tail.StreamTail`). Until ``MIN_PEAKS`` of them were seen it is the
body's quantile, extrapolated exponentially from a few hundred readings: on the simulator's
realistic fleet, 31 of the level member's false alerts came from devices younger than a quarter
of an hour, whose average strayed past a threshold set by minutes of history. Devices of one
kind share a sensor's behaviour, so the others' excursions tell a young one how far its
average strays in a day.

Pooling, per metric of a scope: every device whose level tail has ``MIN_HISTORY`` of history
adds its body's histogram, the readings its excursions were taken from, and its excursion peaks
*below its own threshold in force* (a peak past it was an alert, a fault as often as not: one
device's fault must not teach the fleet that faults are normal). The sum is one
:class:`StreamTail` — the excursions of one stream that read as long as all of them — with the
devices' median interval between readings. A device whose own tail :meth:`knows_excursions
<fleetwatch.models.tail.StreamTail.knows_excursions>` keeps its own threshold; a younger one
takes the higher of its own and the pooled tail's (:meth:`LevelShiftDetector.borrow_tails
<fleetwatch.models.level.LevelShiftDetector.borrow_tails>`).

The pooled tails travel with the scope's fleet model (its parameters' ``FIELD``), so they are
registered, promoted and published with it and follow the champion to the scorer.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from fleetwatch.models.level import LevelShiftDetector
from fleetwatch.models.tail import BINS, MIN_HISTORY, StreamTail, bin_of

FIELD = "level_tails"
"""Where a fleet model's parameters carry the pooled tails: ``{metric: StreamTail.state()}``
with the tail's ``halflife``."""


def member_params(params: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """A device's parameters of detector ``kind``: the detector itself, or that member of a
    combined one."""
    if params.get("kind") == kind:
        return params
    for member in params.get("state", {}).get("members", []):
        if member.get("kind") == kind:
            return member  # type: ignore[no-any-return]
    return None


def pool_level_tails(device_params: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, object]]:
    """``{metric: pooled tail state}`` from devices' parameters (each a level detector's, or
    a combined one's with a level member); metrics no device has ``MIN_HISTORY`` of are left
    out."""
    counts: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(BINS))
    peaks: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(BINS))
    readings: dict[str, float] = defaultdict(float)
    intervals: dict[str, list[float]] = defaultdict(list)
    halflife: dict[str, float] = {}
    for params in device_params:
        level = member_params(params, LevelShiftDetector.kind)
        if level is None:
            continue
        detector = LevelShiftDetector.from_params(level)
        k = len(detector.profile.metrics)
        for name, tail in zip(detector.profile.metrics, detector.tails, strict=True):
            if tail.summary.weight < MIN_HISTORY or tail.interval_ms <= 0:
                continue
            own = detector.own_threshold(tail, k)
            below = tail.peaks.copy()
            below[int(bin_of(own)) :] = 0.0
            counts[name] += tail.summary.counts
            peaks[name] += below
            readings[name] += tail.readings
            intervals[name].append(tail.interval_ms)
            halflife[name] = detector.tail_halflife
    return {
        name: {
            "counts": counts[name].tolist(),
            "peaks": peaks[name].tolist(),
            "readings": readings[name],
            "peak": 0.0,
            "interval_ms": statistics.median(intervals[name]),
            "last_ms": None,
            "halflife": halflife[name],
        }
        for name in sorted(counts)
    }


def level_tails_of(params: Mapping[str, Any]) -> dict[str, StreamTail]:
    """The pooled tails a fleet model's parameters carry (none: an empty mapping). Raises
    ``KeyError``, ``TypeError`` or ``ValueError`` on a malformed one."""
    return {
        str(m): StreamTail.load(float(s["halflife"]), dict(s))
        for m, s in params.get(FIELD, {}).items()
    }
