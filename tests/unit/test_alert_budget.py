"""The false-alert budget as feedback (fleetwatch.models.budget): openings, not rows, are
counted; a stream that overspends is discounted until it does not; the discount relaxes when
the stream is quiet; and the seasonal detector on heavy-tailed noise opens far fewer alerts
with it than without."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fleetwatch.models import budget
from fleetwatch.models.calibration import S_ALERT
from fleetwatch.models.seasonal import SeasonalBaseline

HOUR = 3_600_000


def test_a_long_excursion_is_one_opening_and_short_ones_each_count() -> None:
    state = budget.grow(np.zeros((0, budget.WIDTH)), 2)
    t = np.arange(100, dtype=np.int64) * 1000
    budget.record(state, 0, t, np.arange(100) >= 10, limit=100.0)  # one long excursion
    budget.record(state, 1, t, np.arange(100) % 10 == 0, limit=100.0)  # ten short ones
    assert state[0, 0] == pytest_approx(1.0)
    assert state[1, 0] == pytest_approx(10.0)
    # the second batch continues the first: still the same excursion, no new opening
    budget.record(state, 0, t + 100_000, np.ones(100, bool), limit=100.0)
    assert state[0, 0] == pytest_approx(1.0)


def pytest_approx(value: float) -> object:
    import pytest

    return pytest.approx(value, rel=1e-2)


def test_overspending_builds_a_discount_that_relaxes_when_quiet() -> None:
    state = budget.grow(np.zeros((0, budget.WIDTH)), 1)
    limit = budget.allowed(1.0, 1)
    assert limit == pytest_approx(budget.SLACK + 0.25)
    ticks = np.arange(0, 3 * HOUR, 60_000, dtype=np.int64)  # an opening every two minutes
    on = (np.arange(ticks.size) % 2) == 0
    budget.record(state, 0, ticks, on, limit)
    cut = budget.penalty(state, 0, int(ticks[-1]), limit)
    assert cut > 20  # integrated over ~90 openings over the allowance
    later = budget.penalty(state, 0, int(ticks[-1]) + int(budget.RELAX_MS), limit)
    assert later == pytest_approx(cut / 2)
    quiet = budget.grow(np.zeros((0, budget.WIDTH)), 1)
    budget.record(quiet, 0, ticks, np.zeros(ticks.size, bool), limit)
    assert budget.penalty(quiet, 0, int(ticks[-1]), limit) == 0.0


def heavy_tailed(days: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = int(days * 8640)
    t = 1_767_225_600_000 + np.arange(n, dtype=np.int64) * 10_000
    return pd.DataFrame({"event_ms": t, "metric": "t", "value": 20.0 + 0.5 * rng.standard_t(2, n)})


def openings(detector: SeasonalBaseline, data: pd.DataFrame, chunk: int = 500) -> int:
    """Alerts opened while scoring ``data`` online (score a chunk, then learn it)."""
    opened, was = 0, False
    for lo in range(0, len(data), chunk):
        part = data.iloc[lo : lo + chunk]
        on = detector.score(part).surprise >= S_ALERT
        prev = np.concatenate([[was], on[:-1]])
        opened += int((on & ~prev).sum())
        was = bool(on[-1])
        detector.learn(part)
    return opened


def test_the_seasonal_detector_on_student_t_noise_opens_far_fewer_alerts_with_the_budget() -> None:
    data = heavy_tailed(3, seed=5)
    without = openings(SeasonalBaseline(false_alerts_per_day=None), data)
    with_budget = openings(SeasonalBaseline(), data)
    assert without > 100  # a Gaussian model of Student-t noise: alert after alert
    assert with_budget < without / 3
