"""When a statistic's alert starts and ends: hysteresis, and a release once the alert has fallen.

A statistic ``z`` (a non-negative magnitude, such as the level member's ``|z|``) alerts above a
threshold. Hysteresis keeps an alert on while ``z`` stays above ``low`` (a fraction of the
threshold), so a signal that wobbles about the threshold is one alert, not many. The release
ends an alert that hysteresis would hold on to once ``z`` has stayed under the threshold and at
most ``release`` of the alert's peak for ``hold`` readings in a row: what made the alert is over,
though the statistic may not be all the way back. Everything is vectorised over a batch and
continues from what the batch before left (alerting, the peak of the alert under way, how long
it has been low), so a stream gives the same flags in one batch or many.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


def hysteresis(z: FloatArray, threshold: float, low: float, on: bool) -> BoolArray:
    """Alerting after each reading: set above ``threshold``, reset at or below ``low``, from
    ``on`` before the first."""
    idx = np.arange(z.size)
    last_set = np.maximum.accumulate(np.where(z > threshold, idx, -1 if on else -2))
    last_reset = np.maximum.accumulate(np.where(z <= low, idx, -2 if on else -1))
    out: BoolArray = last_set > last_reset
    return out


def peaks(z: FloatArray, alerting: BoolArray, peak0: float) -> FloatArray:
    """The running peak of ``z`` within each alert (0 outside), the first continuing from
    ``peak0`` when it was under way before."""
    begins = alerting & ~np.concatenate(([peak0 > 0], alerting[:-1]))
    seg = np.cumsum(begins)
    top = float(max(z.max(initial=0.0), peak0)) + 1.0
    lifted = np.where(alerting, z, 0.0) + seg * top
    if peak0 > 0:
        lifted[0] = max(lifted[0], peak0)
    out: FloatArray = np.where(alerting, np.maximum.accumulate(lifted) - seg * top, 0.0)
    return out


def fallen_for(fallen: BoolArray, before: int) -> IntArray:
    """For how many readings in a row ``fallen`` has held after each, ``before`` carried in."""
    idx = np.arange(fallen.size)
    last_not = np.maximum.accumulate(np.where(~fallen, idx, -1 - before))
    out: IntArray = np.where(fallen, idx - last_not, 0)
    return out


def alerts_of(
    z: FloatArray,
    threshold: float,
    low: float,
    on: tuple[bool, float, int],
    release: float | None,
    hold: int,
) -> tuple[BoolArray, FloatArray, IntArray]:
    """Alerting after each reading, each alert's running peak and for how many readings it has
    been low enough to end, from ``on`` (alerting, peak, that count) before the first:
    hysteresis, and an alert whose ``|z|`` has stayed under the threshold and at most ``release``
    of its peak for ``hold`` readings ends there. A batch that neither starts alerting nor
    passes the threshold is quiet throughout (most batches: one comparison, nothing more)."""
    if not on[0] and not (z > threshold).any():
        return np.zeros(z.size, bool), np.zeros(z.size), np.zeros(z.size, np.int64)
    alerting = hysteresis(z, threshold, low, on[0])
    peak = peaks(z, alerting, on[1] if on[0] else 0.0)
    if release is None:
        return alerting, peak, np.zeros(z.size, np.int64)
    start, before = 0, on[2] if on[0] else 0
    count = np.zeros(z.size, np.int64)
    while True:
        part = slice(start, None)
        fallen = alerting[part] & (z[part] <= threshold) & (z[part] <= release * peak[part])
        count[part] = fallen_for(fallen, before)
        found = np.flatnonzero(count[part] >= hold)
        if found.size == 0:
            return alerting, peak, count
        i = start + int(found[0])
        alerting[i], peak[i], count[i] = False, 0.0, 0
        if i + 1 < z.size:
            alerting[i + 1 :] = hysteresis(z[i + 1 :], threshold, low, False)
            peak[i + 1 :] = peaks(z[i + 1 :], alerting[i + 1 :], 0.0)
        start, before = i + 1, 0
