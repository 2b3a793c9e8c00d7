"""A local linear trend: each reading's value predicted from the metric's earlier readings.

Readings are numbered in event-time order (their position ``i``; the sampling interval does not
matter, so the same half-life suits a device that reports every second and one that reports
every minute). The prediction for reading ``i`` is the intercept at ``i`` of a weighted
least-squares line through the earlier readings ``(j, x_j)``, weights ``w_j = 2^(-(i -
j)/halflife)`` (Brown's linear exponential smoothing). A slow movement of the signal (a load
cycle, a steady discharge) is followed with little lag; a step is absorbed over a few half-lives.

With the same weights the carry also keeps the mean square of the line's own residuals, the
signal's recent *volatility*: how far off its predictions have lately been. A metric whose noise
grows (a machine starting up, more vibration when running) is seen as noisier within a few
half-lives, not only by the next model a trainer publishes.

The weighted sums are linear in the weights, so every row of a batch is predicted at once
from prefix sums: with weights ``2^((j - origin)/halflife)`` the common factor ``2^(-(i -
origin)/halflife)`` cancels in the intercept. The sums carried between batches are kept relative
to the last position (every weight at most 1) and re-based when a batch runs far ahead of it.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
CARRY = 8
"""``[origin, Σw, Σw·u, Σw·u², Σw·x, Σw·u·x, Σw', Σw'·r²]``: ``u = j - origin``, origin the
last position; ``w'`` the weights of readings with a prediction, ``r`` its residual."""
_SPAN = 400.0
"""Half-lives a chunk may run past its origin (weights up to 2^400, far from overflow)."""
SMALL = 16
"""Up to this many readings a call steps through them one by one in plain floats: numpy's
per-call cost is most of a live batch's few readings per metric (agreement of the two paths
to rounding is tested)."""


def empty() -> FloatArray:
    return np.zeros(CARRY)


def _rebase(carry: FloatArray, origin: float, halflife: float) -> FloatArray:
    """The same sums relative to a later ``origin``."""
    o, s0, su, suu, sx, sux, wr, sr2 = carry
    if s0 == 0:
        return np.array([origin, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
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
            f * wr,
            f * sr2,
        ]
    )


def predict(
    values: FloatArray, carry: FloatArray, halflife: float
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per reading (event-time order, following those the carry has seen): the prediction from
    the readings before it (NaN while fewer than two are known) and the root mean square of the
    residuals before it (NaN before the first); and the carry after the last reading."""
    n = values.size
    if 0 < n <= SMALL:
        return _predict_steps(values, carry, halflife)
    out, vol = np.full(n, np.nan), np.full(n, np.nan)
    carry = np.asarray(carry, dtype=np.float64)
    if n == 0:
        return out, vol, carry
    first = float(carry[0]) + 1.0 if carry[1] > 0 else 0.0
    if carry[1] == 0:
        carry = np.array([first, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    step = max(1, int(_SPAN * halflife))
    for start in range(0, n, step):
        stop = min(n, start + step)
        origin = float(carry[0])
        u = first + np.arange(start, stop, dtype=np.float64) - origin
        x = values[start:stop]
        w = np.exp2(u / halflife)
        terms = np.stack([w, w * u, w * u * u, w * x, w * u * x])
        totals = np.cumsum(terms, axis=1)
        before = _exclusive(totals) + carry[1:6, None]
        p0, pu, puu, px, pux = before
        s1 = pu - u * p0
        s2 = puu - 2 * u * pu + u * u * p0
        s1x = pux - u * px
        det = p0 * s2 - s1 * s1
        with np.errstate(divide="ignore", invalid="ignore"):
            a = (s2 * px - s1 * s1x) / det
        good = (p0 > 0) & (det > 1e-9 * np.maximum(p0 * s2, 1e-300))
        a = np.where(good, a, np.nan)
        out[start:stop] = a
        wr = np.where(good, w, 0.0)
        r2 = np.where(good, (x - np.where(good, a, 0.0)) ** 2, 0.0)
        spread = np.cumsum(np.stack([wr, wr * r2]), axis=1)
        seen = _exclusive(spread) + carry[6:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            vol[start:stop] = np.where(seen[0] > 0, np.sqrt(seen[1] / seen[0]), np.nan)
        sums = np.concatenate([totals[:, -1], spread[:, -1]])
        last = np.concatenate([[origin], carry[1:] + sums])
        carry = _rebase(last, origin + float(u[-1]), halflife)
    return out, vol, carry


def _predict_steps(
    values: FloatArray, carry: FloatArray, halflife: float
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`predict`, one reading at a time: the sums re-based to each reading's position
    (its own ``u`` is 0), its prediction and volatility read off them, then it is added."""
    o, s0, su, suu, sx, sux, wr, sr2 = (float(c) for c in carry)
    if s0 == 0:
        o, s0, su, suu, sx, sux, wr, sr2 = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
        pos = 0.0
    else:
        pos = o + 1.0
    nan = math.nan
    out: list[float] = []
    vol: list[float] = []
    for x in values.tolist():
        d = pos - o
        if d:
            f = 2.0 ** (-d / halflife)
            suu = f * (suu - 2 * d * su + d * d * s0)
            sux = f * (sux - d * sx)
            su = f * (su - d * s0)
            s0, sx, wr, sr2 = f * s0, f * sx, f * wr, f * sr2
            o = pos
        det = s0 * suu - su * su
        good = s0 > 0 and det > 1e-9 * max(s0 * suu, 1e-300)
        a = (suu * sx - su * sux) / det if good else nan
        out.append(a)
        vol.append(math.sqrt(sr2 / wr) if wr > 0 else nan)
        s0 += 1.0
        sx += x
        if good:
            wr += 1.0
            sr2 += (x - a) ** 2
        pos += 1.0
    return np.array(out), np.array(vol), np.array([o, s0, su, suu, sx, sux, wr, sr2])


def _exclusive(running: FloatArray) -> FloatArray:
    """Running totals along axis 1 shifted by one: each column the sum before it."""
    return np.concatenate([np.zeros((running.shape[0], 1)), running[:, :-1]], axis=1)
