"""A local linear trend: each reading's value predicted from the metric's earlier readings.

Readings are numbered in event-time order (their position ``i``; the sampling interval does not
matter, so the same half-life suits a device that reports every second and one that reports
every minute). The prediction for reading ``i`` is the intercept at ``i`` of a weighted
least-squares line through the earlier readings ``(j, x_j)``, weights ``w_j = 2^(-(i -
j)/halflife)`` (Brown's linear exponential smoothing). A slow movement of the signal (a load
cycle, a steady discharge) is followed with little lag; a step is absorbed over a few half-lives.

The five weighted sums are linear in the weights, so every row of a batch is predicted at once
from prefix sums: with weights ``2^((j - origin)/halflife)`` the common factor ``2^(-(i -
origin)/halflife)`` cancels in the intercept. The sums carried between batches are kept relative
to the last position (every weight at most 1) and re-based when a batch runs far ahead of it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
CARRY = 6
"""``[origin, Σw, Σw·u, Σw·u², Σw·x, Σw·u·x]``: ``u = j - origin``, origin the last position."""
_SPAN = 400.0
"""Half-lives a chunk may run past its origin (weights up to 2^400, far from overflow)."""


def empty() -> FloatArray:
    return np.zeros(CARRY)


def _rebase(carry: FloatArray, origin: float, halflife: float) -> FloatArray:
    """The same sums relative to a later ``origin``."""
    o, s0, su, suu, sx, sux = carry
    if s0 == 0:
        return np.array([origin, 0.0, 0.0, 0.0, 0.0, 0.0])
    d = origin - o
    f = 2.0 ** (-d / halflife)
    return np.array(
        [
            origin,
            f * s0,
            f * (su - d * s0),
            f * (suu - 2 * d * su + d * d * s0),
            f * sx,
            f * (sux - d * sx),
        ]
    )


def predict(
    values: FloatArray, carry: FloatArray, halflife: float
) -> tuple[FloatArray, FloatArray]:
    """Per reading (event-time order, following those the carry has seen), the prediction from
    the readings before it (NaN while fewer than two are known); and the carry after the last."""
    n = values.size
    out = np.full(n, np.nan)
    carry = np.asarray(carry, dtype=np.float64)
    if n == 0:
        return out, carry
    first = float(carry[0]) + 1.0 if carry[1] > 0 else 0.0
    if carry[1] == 0:
        carry = np.array([first, 0.0, 0.0, 0.0, 0.0, 0.0])
    step = max(1, int(_SPAN * halflife))
    for start in range(0, n, step):
        stop = min(n, start + step)
        origin = float(carry[0])
        u = first + np.arange(start, stop, dtype=np.float64) - origin
        x = values[start:stop]
        w = np.exp2(u / halflife)
        terms = np.stack([w, w * u, w * u * u, w * x, w * u * x])
        totals = np.cumsum(terms, axis=1)
        before = np.concatenate([np.zeros((5, 1)), totals[:, :-1]], axis=1) + carry[1:, None]
        p0, pu, puu, px, pux = before
        s1 = pu - u * p0
        s2 = puu - 2 * u * pu + u * u * p0
        s1x = pux - u * px
        det = p0 * s2 - s1 * s1
        with np.errstate(divide="ignore", invalid="ignore"):
            a = (s2 * px - s1 * s1x) / det
        good = (p0 > 0) & (det > 1e-9 * np.maximum(p0 * s2, 1e-300))
        out[start:stop] = np.where(good, a, np.nan)
        last = np.concatenate([[origin], carry[1:] + totals[:, -1]])
        carry = _rebase(last, origin + float(u[-1]), halflife)
    return out, carry
