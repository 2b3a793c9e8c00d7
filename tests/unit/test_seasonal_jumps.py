"""The seasonal member's neighbours: a reading far off the median of its metric's latest
readings is judged as further off than its profile alone makes it (up to ``jump_ratio`` times),
so a spike on a metric that wanders is not hidden by the wander its profile's spread holds."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from fleetwatch.models.base import ScoringMemory
from fleetwatch.models.calibration import S_ALERT
from fleetwatch.models.neighbours import MIN_NEIGHBOURS, medians_before
from fleetwatch.models.seasonal import SeasonalBaseline
from fleetwatch.models.trend import SMALL

JUMP_RATIO = 3.0
"""The ``jump_ratio`` these tests turn the option on with (it is off by default: ``None``)."""
START = 1_767_225_600_000
STEP_MS = 1_000


def wander(minutes: int, seed: int = 5) -> pd.DataFrame:
    """A humidity that wanders (a random walk, 4.6 %RH over the hour) under 1 %RH of noise,
    on a 0.1 grid, one reading a second."""
    rng = np.random.default_rng(seed)
    n = minutes * 60
    value = 55.0 + 0.15 * np.cumsum(rng.standard_normal(n)) + rng.standard_normal(n)
    t = START + np.arange(n, dtype=np.int64) * STEP_MS
    return pd.DataFrame({"event_ms": t, "metric": "humidity", "value": np.round(value, 1)})


def online(detector: SeasonalBaseline, frame: pd.DataFrame) -> SeasonalBaseline:
    for lo in range(0, len(frame), 10):
        part = frame.iloc[lo : lo + 10]
        detector.learn(part, exclude=detector.score(part).surprise >= S_ALERT)
    return detector


def probe(t_ms: int, *values: float) -> pd.DataFrame:
    times = t_ms + STEP_MS * np.arange(len(values))
    return pd.DataFrame({"event_ms": times, "metric": "humidity", "value": list(values)})


@pytest.mark.parametrize("n", [1, SMALL, SMALL + 1, 60])
@pytest.mark.parametrize("before", [0, 2, 4, 5, 9])
def test_the_neighbours_median_is_that_of_the_readings_just_before(n: int, before: int) -> None:
    rng = np.random.default_rng(n * 10 + before)
    head, values = rng.normal(size=before).tolist(), rng.normal(size=n)
    got = medians_before(head, values, 5)
    series = head + values.tolist()
    for i, x in enumerate(got):
        window = series[max(0, before + i - 5) : before + i]
        if len(window) < MIN_NEIGHBOURS:
            assert math.isnan(x)
        else:
            assert x == pytest.approx(float(np.median(window)))


def test_a_spike_on_a_wandering_metric_alerts_off_its_neighbours() -> None:
    frame = wander(60)
    last = int(frame.event_ms.iloc[-1])
    level = float(frame.value.iloc[-5:].median())
    with_jumps = online(SeasonalBaseline(jump_ratio=JUMP_RATIO), frame)
    profile_only = online(SeasonalBaseline(jump_ratio=None), frame)
    spike = probe(last + STEP_MS, level + 12.0)  # 12 noise deviations, under 3 of the profile's
    assert with_jumps.score(spike).surprise[0] >= S_ALERT
    assert profile_only.score(spike).surprise[0] < S_ALERT
    assert with_jumps.score(probe(last + STEP_MS, level + 1.0)).surprise[0] < S_ALERT


def test_the_scorers_latest_readings_are_the_neighbours() -> None:
    """The scorer's memory of the metric's latest readings is newer than the parameters': a
    level the metric has just moved to is no jump from its own neighbours."""
    frame = wander(60)
    detector = online(SeasonalBaseline(jump_ratio=JUMP_RATIO), frame)
    last = int(frame.event_ms.iloc[-1])
    level = float(frame.value.iloc[-5:].median())
    reading = probe(last + 6 * STEP_MS, level + 12.0)
    before = float(detector.score(reading).surprise[0])
    detector.resume(ScoringMemory(recent={"humidity": [level + 12.0] * 5}))
    assert float(detector.score(reading).surprise[0]) < before
    detector.resume(ScoringMemory())  # an empty memory: the parameters' own neighbours
    assert float(detector.score(reading).surprise[0]) == pytest.approx(before)


def test_the_neighbours_round_trip_through_the_parameters() -> None:
    frame = wander(40)
    detector = online(SeasonalBaseline(jump_ratio=JUMP_RATIO), frame)
    again = SeasonalBaseline.from_params(detector.to_params())
    last = int(frame.event_ms.iloc[-1])
    level = float(frame.value.iloc[-5:].median())
    batch = probe(last + STEP_MS, level, level + 12.0, level + 3.0, level - 9.0)
    np.testing.assert_array_equal(detector.score(batch).surprise, again.score(batch).surprise)
    assert again.recent == detector.recent


def stopping_machine(spells: list[tuple[int, bool]]) -> tuple[SeasonalBaseline, int]:
    """A machine's speed (1,480 ± 4 rpm running, 0 stopped), learned online; each stop and
    start adopted by the combined detector's gate from its 5th minute on."""
    rng = np.random.default_rng(3)
    running = np.concatenate([np.full(m * 60, on) for m, on in spells])
    rpm = np.where(running, 1480.0 + 4.0 * rng.standard_normal(running.size), 0.0)
    t = START + np.arange(running.size, dtype=np.int64) * STEP_MS
    frame = pd.DataFrame({"event_ms": t, "metric": "rpm", "value": np.round(rpm)})
    changed = np.flatnonzero(np.diff(running.astype(int))) + 1
    adopted = np.zeros(running.size, bool)
    for at in changed:
        adopted[at + 5 * 60 : at + 10 * 60] = True
    detector = SeasonalBaseline(jump_ratio=JUMP_RATIO)
    for lo in range(0, len(frame), 10):
        part = frame.iloc[lo : lo + 10]
        alerts = detector.score(part).surprise >= S_ALERT
        detector.learn(part, exclude=alerts & ~adopted[lo : lo + 10])
    return detector, int(t[-1])


def test_a_switch_between_known_regimes_is_no_jump() -> None:
    """A machine stopping: its speed falls 1,480 rpm from its neighbours, but to a state its
    profile knows (near 0 against the stopped regime), so the neighbours add nothing."""
    detector, last = stopping_machine([(10, True), (10, False), (10, True)])
    stop = pd.DataFrame({"event_ms": [last + STEP_MS], "metric": ["rpm"], "value": [0.0]})
    assert detector.alt.metrics == ["rpm"]
    assert detector.score(stop).surprise[0] < S_ALERT


def test_moves_between_regimes_do_not_widen_the_neighbours_spread() -> None:
    """Each start or stop the gate learned is a reading 1,480 rpm off its neighbours; counted,
    a few of them had made the spread of a 4 rpm noise some 50 rpm, and a 440 rpm spike on the
    machine no jump at all."""
    detector, _ = stopping_machine([(8, True), (8, False)] * 4)
    assert detector.near.sd(0, detector.warmup) < 3 * 4.0
