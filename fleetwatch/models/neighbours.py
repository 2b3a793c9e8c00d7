"""A reading against its latest neighbours: the median of the metric's readings just before it.

A metric that wanders (a room's humidity, a machine's speed under load, a grid's voltage) has a
profile whose spread holds hours of wander, so a spike or a step of many noise deviations can
sit inside the profile's band. Against the median of its ``window`` readings before it, the same
reading is as far off as its noise makes it: the wander of a few readings is small, one shock
among the neighbours does not move their median, and a step is absorbed once half the window
has taken the new level.

:func:`medians_before` gives that reference per reading; :class:`NeighbourScale` learns how far
off the median a normal reading is: the root mean square of the residuals, time-decayed, the
same measure as a profile's standard deviation. So for noise without wander, whatever its tail,
a reading is as far off its neighbours as off its profile (a mean absolute residual, smaller
than the root mean square by a factor that grows with the tail's weight, would make a
heavy-tailed stream's every shock look several times as far off its neighbours as off its
profile).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from fleetwatch.models.trend import SMALL

FloatArray = npt.NDArray[np.float64]
MIN_NEIGHBOURS = 3
"""Readings before a reading its median needs (fewer: no reference)."""


def medians_before(before: Sequence[float], values: FloatArray, window: int) -> FloatArray:
    """Per value of ``values`` (in order, after ``before``): the median of the up to ``window``
    values just before it, NaN while fewer than ``MIN_NEIGHBOURS`` precede it."""
    head = list(before)[-window:]
    n = values.size
    if n <= SMALL:
        out: list[float] = []
        seen = head
        for x in values.tolist():
            out.append(_median(seen[-window:]) if len(seen) >= MIN_NEIGHBOURS else math.nan)
            seen.append(x)
        return np.array(out, dtype=np.float64)
    series = np.concatenate([np.asarray(head, np.float64), values])
    k = len(head)
    result = np.full(n, np.nan)
    # readings with fewer than ``window`` before them: one by one
    short = min(n, max(window - k, 0))
    for i in range(short):
        if k + i >= MIN_NEIGHBOURS:
            result[i] = float(np.median(series[: k + i]))
    if short < n:
        windows = sliding_window_view(series[: k + n - 1], window)
        result[short:] = np.median(windows[k + short - window :], axis=1)
    return result


def _median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else 0.5 * (s[mid - 1] + s[mid])


class NeighbourScale:
    """Per metric, a time-decayed ``[W, Σw·r²]`` of residuals from the neighbours' median, and
    how many were learned; :meth:`sd` is the spread they give (NaN while too few)."""

    def __init__(self, sums: FloatArray | None = None, counts: npt.NDArray[np.int64] | None = None):
        self.sums = np.zeros((0, 2)) if sums is None else sums
        self.counts = np.zeros(0, np.int64) if counts is None else counts

    def grow(self, metrics: int) -> None:
        more = metrics - len(self.counts)
        self.sums = np.concatenate([self.sums, np.zeros((more, 2))])
        self.counts = np.concatenate([self.counts, np.zeros(more, np.int64)])

    def add(self, m: int, residuals: FloatArray, weights: FloatArray) -> None:
        self.sums[m] += (float(weights.sum()), float((weights * residuals * residuals).sum()))
        self.counts[m] += residuals.size

    def sd(self, m: int, warmup: int) -> float:
        if m >= self.counts.size or self.counts[m] < warmup or self.sums[m, 0] <= 0:
            return math.nan
        return math.sqrt(self.sums[m, 1] / self.sums[m, 0])
