"""One calibration for every detector: a tail probability, its surprise, and a score.

Each detector models its own statistic under "normal" and reports the *surprise* of a row,
``s = -ln p`` where ``p`` is the probability of a statistic at least as extreme under that model.
Every detector maps surprise to a score with the same function::

    score = s / (s + S_ALERT),   S_ALERT = -ln(ALERT_P)

so a score of 0.5 means ``p = ALERT_P`` whatever the detector, scores are comparable across
detectors, and the map is strictly increasing without saturating: a score reaches exactly 1.0
only when ``s`` exceeds about 1e17 nats, far beyond any finite reading. (``1 - p`` would be
1.0 for every ``p < 1e-16``, losing the ranking of extreme anomalies.)
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

ALERT_P = 1e-6
"""Per-row tail probability at which a row alerts."""
S_ALERT = -math.log(ALERT_P)
ALERT_SCORE = 0.5

_ERFC_POLY = (
    0.17087277,
    -0.82215223,
    1.48851587,
    -1.13520398,
    0.27886807,
    -0.18628806,
    0.09678418,
    0.37409196,
    1.00002368,
    -1.26551223,
)


def score_from_surprise(surprise: npt.ArrayLike) -> FloatArray:
    s = np.maximum(np.asarray(surprise, dtype=np.float64), 0.0)
    out: FloatArray = s / (s + S_ALERT)
    return out


def log_erfc(x: npt.ArrayLike) -> FloatArray:
    """``ln erfc(x)`` for ``x >= 0`` without underflow (Chebyshev fit, relative error < 1.2e-7
    in ``erfc``; Numerical Recipes ``erfcc`` taken in log form)."""
    x = np.abs(np.asarray(x, dtype=np.float64))
    t = 1.0 / (1.0 + 0.5 * x)
    poly = np.zeros_like(t)
    for c in _ERFC_POLY[:-1]:
        poly = (poly + c) * t
    out: FloatArray = np.log(t) - x * x + poly + _ERFC_POLY[-1]
    return out


def normal_two_sided_surprise(z: npt.ArrayLike) -> FloatArray:
    """``-ln P(|Z| >= |z|)`` for a standard normal ``Z``."""
    out: FloatArray = np.maximum(-log_erfc(np.abs(np.asarray(z)) / math.sqrt(2.0)), 0.0)
    return out


def normal_upper_surprise(z: npt.ArrayLike) -> FloatArray:
    """``-ln P(Z >= z)`` for a standard normal ``Z``."""
    z = np.asarray(z, dtype=np.float64)
    tail = log_erfc(np.abs(z) / math.sqrt(2.0))
    half_tail = 0.5 * np.exp(tail)
    upper = math.log(2.0) - tail
    out: FloatArray = np.where(z >= 0, upper, -np.log1p(-half_tail))
    return np.maximum(out, 0.0)


def _solve_two_sided_z(surprise: float) -> float:
    lo, hi = 0.0, 40.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if float(normal_two_sided_surprise(mid)) < surprise:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


ALERT_Z = _solve_two_sided_z(S_ALERT)
"""The |z| at which a normal deviation alerts (about 4.89)."""
