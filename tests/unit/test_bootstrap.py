"""Bootstrap intervals over units: they cover the figure, narrow with more units, and are
reproducible."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetwatch.evaluation.bootstrap import interval
from fleetwatch.evaluation.errors import EvaluationError


def mean(units: object) -> float:
    return float(np.mean(np.asarray(units, dtype=float)))


def test_an_interval_holds_the_figure_and_narrows_with_more_units() -> None:
    rng = np.random.default_rng(7)
    few, many = list(rng.normal(5.0, 1.0, 20)), list(rng.normal(5.0, 1.0, 500))
    low, high = interval(few, mean)
    assert low < mean(few) < high
    wide = high - low
    low, high = interval(many, mean)
    assert low < mean(many) < high
    assert high - low < wide / 3  # about sqrt(25) = 5 times narrower


def test_the_same_seed_gives_the_same_interval() -> None:
    units = list(np.arange(30.0))
    assert interval(units, mean, seed=3) == interval(units, mean, seed=3)


def test_one_unit_has_no_interval_and_a_level_must_be_a_fraction() -> None:
    assert all(math.isnan(v) for v in interval([1.0], mean))
    with pytest.raises(EvaluationError, match="level"):
        interval([1.0, 2.0], mean, level=95)
