"""SKAB's outlier protocol: every row is a binary label, every flagged row a binary prediction.

As SKAB scores it (``tsad``'s ``evaluating(metric="binary")``, also SKAB's ``core/metrics.py``):
the confusion counts are summed over all files first, and then

- F1 = TP / (TP + (FP + FN) / 2);
- FAR % (false alarm rate) = 100 · FP / (FP + TN), the share of normal rows flagged;
- MAR % (missing alarm rate) = 100 · FN / (FN + TP), the share of anomalous rows not flagged.

tsad rounds each to two decimals; these functions do not round. A ratio with nothing to divide
(no anomalous row, say) is NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleetwatch.evaluation.errors import EvaluationError


def _ratio(numerator: int, denominator: float) -> float:
    return numerator / denominator if denominator else math.nan


@dataclass(frozen=True)
class Confusion:
    """Row counts; add the counts of several files with ``+``."""

    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0

    def __add__(self, other: Confusion) -> Confusion:
        return Confusion(
            self.tp + other.tp, self.fp + other.fp, self.tn + other.tn, self.fn + other.fn
        )

    @property
    def f1(self) -> float:
        return _ratio(self.tp, self.tp + (self.fn + self.fp) / 2)

    @property
    def far_pct(self) -> float:
        return 100 * _ratio(self.fp, self.fp + self.tn)

    @property
    def mar_pct(self) -> float:
        return 100 * _ratio(self.fn, self.fn + self.tp)


def binary(values: npt.ArrayLike, what: str) -> npt.NDArray[np.bool_]:
    """0/1 (or boolean) labels as booleans; anything else is refused."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise EvaluationError(f"{what} must be one-dimensional, got shape {array.shape}")
    if array.dtype != np.bool_ and not np.isin(array, (0, 1)).all():
        raise EvaluationError(f"{what} must be 0 or 1")
    return array.astype(bool)


def confusion(labels: npt.ArrayLike, flags: npt.ArrayLike) -> Confusion:
    """Counts of one file: ``labels`` (1 = anomalous row) against ``flags`` (1 = flagged)."""
    truth = binary(labels, "labels")
    flagged = binary(flags, "flags")
    if truth.shape != flagged.shape:
        raise EvaluationError(f"{truth.size} labels but {flagged.size} flags")
    return Confusion(
        tp=int((truth & flagged).sum()),
        fp=int((~truth & flagged).sum()),
        tn=int((~truth & ~flagged).sum()),
        fn=int((truth & ~flagged).sum()),
    )
