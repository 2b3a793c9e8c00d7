"""A false-alert rate's exact Poisson interval and what it says of a budget."""

from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.evaluation.errors import EvaluationError
from fleetwatch.evaluation.rates import rate_interval, verdict


def test_the_interval_matches_garwoods_tabulated_values() -> None:
    # exact 95 % limits for a Poisson mean: k = 0 → (0, 3.689), k = 3 → (0.619, 8.767)
    assert rate_interval(0, 1.0) == pytest.approx((0.0, 3.689), abs=1e-3)
    assert rate_interval(3, 1.0) == pytest.approx((0.619, 8.767), abs=1e-3)
    assert rate_interval(3, 3.0) == pytest.approx((0.619 / 3, 8.767 / 3), abs=1e-3)


def test_the_interval_covers_the_true_rate_about_as_often_as_it_says() -> None:
    rng = np.random.default_rng(3)
    rate, exposure = 1.3, 18.0
    counts = rng.poisson(rate * exposure, 4000)
    covered = np.mean(
        [lo <= rate <= hi for lo, hi in (rate_interval(int(k), exposure) for k in counts)]
    )
    assert 0.94 <= covered <= 0.99  # exact intervals are conservative: at least the level


def test_a_budget_is_broken_held_or_undecided_by_the_whole_interval() -> None:
    assert verdict(7, 3.0, 1.0) == "undecided"  # 2.33 a day, but 3 device-days: 0.94 to 4.8
    assert verdict(25, 3.0, 1.0) == "broken"
    assert verdict(0, 3.0, 1.0) == "undecided"  # none seen, and up to 1.23 a day possible
    assert verdict(0, 10.0, 1.0) == "held"
    assert verdict(55, 18.0, 1.0) == "broken"


def test_a_rate_needs_a_positive_exposure() -> None:
    with pytest.raises(EvaluationError, match="exposure"):
        rate_interval(1, 0.0)
    with pytest.raises(EvaluationError):
        rate_interval(-1, 1.0)
