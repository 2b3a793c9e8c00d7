"""Ranking figures of the quality benches (fleetwatch.evaluation.ranking), checked against
scikit-learn's average precision on random and tied scores, and on hand-worked cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from fleetwatch.evaluation.errors import EvaluationError
from fleetwatch.evaluation.ranking import average_precision, saturated_share


@pytest.mark.parametrize("seed", range(5))
def test_average_precision_is_scikit_learns(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = rng.random(500) < 0.2
    scores = np.round(rng.random(500) + 0.3 * labels, 1)  # many ties
    assert average_precision(labels, scores) == pytest.approx(
        average_precision_score(labels, scores)
    )


def test_average_precision_worked_examples() -> None:
    assert average_precision([1, 1, 0, 0], [0.9, 0.8, 0.2, 0.1]) == 1.0
    # ranks 1 and 3: (1/1 + 2/3) / 2
    assert average_precision([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.1]) == pytest.approx(5 / 6)
    # every score the same: the share of labelled rows
    assert average_precision([1, 0, 0, 0], [1.0, 1.0, 1.0, 1.0]) == pytest.approx(0.25)
    assert math.isnan(average_precision([0, 0], [0.5, 0.2]))
    with pytest.raises(EvaluationError):
        average_precision([1, 0], [0.5])


def test_the_saturated_share_counts_scores_at_the_top() -> None:
    assert saturated_share([0.5, 0.999, 1.0, 0.2]) == 0.5
    assert math.isnan(saturated_share([]))
