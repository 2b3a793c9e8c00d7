"""The seasonal and PCA members judged against each stream's own history (models/tail.py): on
heavy-tailed noise they open far fewer alerts than their Gaussian models would, and a real
anomaly still stands out of that history."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from fleetwatch.models import multivariate, seasonal
from fleetwatch.models.calibration import S_ALERT
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.seasonal import SeasonalBaseline

START = 1_767_225_600_000
STEP_MS = 10_000
PER_DAY = 86_400_000 // STEP_MS


def coupled(days: float, seed: int, dof: float = 2.5) -> pd.DataFrame:
    """Two metrics that move together, each with heavy-tailed (Student-t) noise of its own."""
    rng = np.random.default_rng(seed)
    n = int(days * PER_DAY)
    t = START + np.arange(n, dtype=np.int64) * STEP_MS
    common = rng.normal(0.0, 1.0, n)
    a = 20.0 + common + 0.3 * rng.standard_t(dof, n)
    b = 50.0 + 2.0 * common + 0.6 * rng.standard_t(dof, n)
    return pd.DataFrame(
        {
            "event_ms": np.repeat(t, 2),
            "metric": np.tile(["a", "b"], n),
            "value": np.column_stack([a, b]).ravel(),
        }
    )


def heavy(days: float, seed: int, dof: float = 2.5) -> pd.DataFrame:
    """One metric with heavy-tailed (Student-t) noise."""
    rng = np.random.default_rng(seed)
    n = int(days * PER_DAY)
    t = START + np.arange(n, dtype=np.int64) * STEP_MS
    return pd.DataFrame({"event_ms": t, "metric": "a", "value": 20.0 + rng.standard_t(dof, n)})


def openings(detector: SeasonalBaseline | PcaDetector, data: pd.DataFrame) -> int:
    """Alert openings (any metric) scored online: score a chunk, then learn it."""
    count, was = 0, False
    for lo in range(0, len(data), 400):
        part = data.iloc[lo : lo + 400]
        scores = detector.score(part)
        on = np.asarray(
            pd.Series(scores.surprise >= S_ALERT).groupby(part.event_ms.to_numpy()).any()
        )
        count += int((on & ~np.concatenate([[was], on[:-1]])).sum())
        was = bool(on[-1])
        detector.learn(part)
    return count


@pytest.mark.parametrize(
    ("make", "module", "stream"),
    [(PcaDetector, multivariate, coupled), (SeasonalBaseline, seasonal, heavy)],
)
def test_heavy_tails_open_far_fewer_alerts_judged_by_the_stream_s_own_tail(
    make: type, module: object, stream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = stream(3.0, seed=8)
    own = openings(make(), data)
    monkeypatch.setattr(module, "MIN_HISTORY", float("inf"))  # never trusted: the model's tail
    modelled = openings(make(), data)
    assert modelled > 3 * 3  # a Gaussian model of Student-t noise alerts many times a day
    assert own < modelled / 3


def test_a_broken_correlation_still_stands_out_of_the_device_s_own_history() -> None:
    data = coupled(2.0, seed=9)
    detector = PcaDetector().learn(data.iloc[:2000]).learn(data.iloc[2000:])
    assert detector.tail.summary.weight > 1000  # judged by its own history, not the model
    after = coupled(0.01, seed=10)
    after["event_ms"] += 2 * 86_400_000
    b = (after.metric == "b").to_numpy()
    after.loc[b, "value"] -= 24.0  # b no longer follows a, well beyond its noise's own tail
    assert detector.score(after).alert.all()
