import numpy as np
import pytest

from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.models.errors import HyperParameterError

DETECTOR = FixedBaseline(bands={"temperature": (21.0, 8.0)})


def test_only_values_outside_the_band_alert() -> None:
    result = DETECTOR.score(["temperature"] * 5, [21.0, 28.9, 13.1, 29.5, 10.0])
    assert list(result.anomalous) == [False, False, False, True, True]
    assert list(result.expected) == [21.0] * 5
    assert list(result.band) == [8.0] * 5


def test_scores_rank_by_distance_and_stay_below_one() -> None:
    result = DETECTOR.score(["temperature"] * 3, [30.0, 50.0, 1e9])
    assert 0 < result.score[0] < result.score[1] < result.score[2] < 1


def test_unknown_metrics_never_alert() -> None:
    assert not DETECTOR.score(["humidity"], [1e6]).anomalous.any()


def test_params_round_trip() -> None:
    assert FixedBaseline.from_params(DETECTOR.to_params()) == DETECTOR


def test_a_non_positive_band_is_refused() -> None:
    with pytest.raises(HyperParameterError, match="must be > 0"):
        FixedBaseline(bands={"t": (0.0, 0.0)})


def test_a_few_pairs_score_as_many_do() -> None:
    """The plain-float path for a few pairs gives the numpy path's figures exactly."""
    baseline = FixedBaseline(bands={"temperature": (21.0, 8.0), "humidity": (40.0, 5.0)})
    names = ["temperature", "humidity", "pressure", "temperature", "humidity", "temperature"]
    values = [21.5, 52.0, 1000.0, float("nan"), 35.0, -3.25]
    few = baseline.score(names, values)
    many = baseline.score(names * 4, values * 4)  # beyond SMALL: numpy
    for field in ("expected", "band", "score", "anomalous"):
        np.testing.assert_array_equal(getattr(few, field), getattr(many, field)[: len(names)])
    assert few.anomalous.tolist() == [False, True, False, False, False, True]


def test_pairs_scored_one_by_one_give_the_columns_figures() -> None:
    """:meth:`FixedBaseline.score_each` (the scorer's per-device path) and the numpy path of
    :meth:`FixedBaseline.score` agree exactly, unknown metrics and NaN values included."""
    baseline = FixedBaseline(bands={"temperature": (21.0, 8.0), "humidity": (40.0, 5.0)})
    names = ["temperature", "humidity", "pressure", "temperature", "humidity", "temperature"]
    values = [21.5, 52.0, 1000.0, float("nan"), 35.0, -3.25]
    each = baseline.score_each(names, values)
    many = baseline.score(names * 4, values * 4)  # beyond SMALL: numpy
    for i, field in enumerate(("expected", "band", "score", "anomalous")):
        got = np.array([s[i] for s in each])
        np.testing.assert_array_equal(got, getattr(many, field)[: len(names)])
