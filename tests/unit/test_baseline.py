import numpy as np
import pandas as pd
import pytest

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.streaming.scoring import ALERT_COLUMNS, score_readings

DETECTOR = FixedBaseline(bands={"temperature": (21.0, 8.0)})


def frame(values: list[float], metric: str = "temperature") -> pd.DataFrame:
    n = len(values)
    return pd.DataFrame(
        {
            "device_id": [f"d{i % 2}" for i in range(n)],
            "seq": np.arange(n, dtype=np.int64),
            "event_ms": np.arange(n, dtype=np.int64) * 1000,
            "received_ms": np.arange(n, dtype=np.int64) * 1000 + 5,
            "metric": [metric] * n,
            "value": values,
        }
    )


def test_only_readings_outside_the_band_alert() -> None:
    alerts = score_readings(frame([21.0, 28.9, 13.1, 29.5, 10.0]), DETECTOR, now_ms=99)
    assert list(alerts["seq"]) == [3, 4]
    assert list(alerts.columns) == ALERT_COLUMNS
    assert set(alerts["detected_ms"]) == {99}


def test_scores_rank_by_distance_and_stay_below_one() -> None:
    result = DETECTOR.score(["temperature"] * 3, [30.0, 50.0, 1e9])
    assert 0 < result.score[0] < result.score[1] < result.score[2] < 1


def test_unknown_metrics_never_alert() -> None:
    assert score_readings(frame([1e6], metric="humidity"), DETECTOR, now_ms=0).empty


def test_alert_ids_are_deterministic() -> None:
    first = score_readings(frame([21.0, 99.0]), DETECTOR, now_ms=1)
    again = score_readings(frame([21.0, 99.0]), DETECTOR, now_ms=2)
    assert list(first["alert_id"]) == list(again["alert_id"])


def test_an_empty_batch_gives_an_empty_frame_with_the_alert_columns() -> None:
    assert list(score_readings(frame([]), DETECTOR, now_ms=0).columns) == ALERT_COLUMNS


def test_params_round_trip() -> None:
    assert FixedBaseline.from_params(DETECTOR.to_params()) == DETECTOR


def test_a_non_positive_band_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="must be > 0"):
        FixedBaseline(bands={"t": (0.0, 0.0)})
