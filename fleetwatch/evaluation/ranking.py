"""Whether scores rank: a user who picks their own threshold on ``anomaly_score`` needs rows
ordered by how surprising they are over the whole range, not a mass of identical maxima.

- :func:`average_precision`: the area under the precision/recall curve of the scores against
  binary labels, as the mean precision at each labelled row's rank (ties taken together, as
  scikit-learn's ``average_precision_score`` takes them); 1.0 ranks every labelled row first,
  the share of labelled rows is what a random order gives.
- :func:`saturated_share`: the share of rows scoring at or above ``top`` (0.999 by default),
  where a ranking can no longer tell rows apart.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from fleetwatch.evaluation.errors import EvaluationError


def average_precision(labels: npt.ArrayLike, scores: npt.ArrayLike) -> float:
    """``Σ (R_k - R_(k-1)) · P_k`` over the distinct scores from the highest down; NaN without a
    labelled row."""
    y = np.asarray(labels, dtype=bool)
    s = np.asarray(scores, dtype=np.float64)
    if y.shape != s.shape or y.ndim != 1:
        raise EvaluationError(f"labels {y.shape} and scores {s.shape} must be one row each")
    if np.isnan(s).any():
        raise EvaluationError("scores must not be NaN")
    positives = int(y.sum())
    if positives == 0:
        return math.nan
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last_of_tie = np.flatnonzero(np.r_[s[1:] != s[:-1], True])
    true_pos = np.cumsum(y)[last_of_tie]
    precision = true_pos / (last_of_tie + 1)
    recall_step = np.diff(np.r_[0, true_pos]) / positives
    return float(np.dot(recall_step, precision))


def saturated_share(scores: npt.ArrayLike, top: float = 0.999) -> float:
    """The share of scores at or above ``top`` (NaN without a score)."""
    s = np.asarray(scores, dtype=np.float64)
    return float((s >= top).mean()) if s.size else math.nan
