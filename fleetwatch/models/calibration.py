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
from scipy.special import log_ndtr, ndtri

FloatArray = npt.NDArray[np.float64]

ALERT_P = 1e-6
"""Per-row tail probability at which a row alerts."""
S_ALERT = -math.log(ALERT_P)
_LN2 = math.log(2.0)


def score_from_surprise(surprise: npt.ArrayLike) -> FloatArray:
    s = np.maximum(np.asarray(surprise, dtype=np.float64), 0.0)
    out: FloatArray = s / (s + S_ALERT)
    return out


ALERT_SCORE = float(score_from_surprise(S_ALERT))
"""The score of a row at ``ALERT_P`` (``S_ALERT`` through the map above: exactly 0.5), at and
above which a row alerts."""


def normal_two_sided_surprise(z: npt.ArrayLike) -> FloatArray:
    """``-ln P(|Z| >= |z|)`` for a standard normal ``Z``: ``-ln 2 - ln Φ(-|z|)``."""
    tail = _LN2 + log_ndtr(-np.abs(np.asarray(z, dtype=np.float64)))
    out: FloatArray = np.maximum(-tail, 0.0)
    return out


def normal_upper_surprise(z: npt.ArrayLike) -> FloatArray:
    """``-ln P(Z >= z)`` for a standard normal ``Z``: ``-ln Φ(-z)``."""
    out: FloatArray = np.maximum(-log_ndtr(-np.asarray(z, dtype=np.float64)), 0.0)
    return out


ALERT_Z = float(-ndtri(ALERT_P / 2))
"""The |z| at which a normal deviation alerts (about 4.89): ``P(|Z| >= ALERT_Z) = ALERT_P``."""
