"""The seasonal member's second regime: a metric that switches between two states (a machine
running or stopped) is judged against the state it is in, not the mixture of both."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fleetwatch.models.calibration import S_ALERT
from fleetwatch.models.seasonal import SeasonalBaseline

START = 1_767_225_600_000
STEP_MS = 1_000


def machine(minutes: list[tuple[int, bool]], seed: int = 3) -> pd.DataFrame:
    """A machine's speed, one reading a second: ``(minutes, running)`` spells in order;
    1,480 ± 4 rpm running, 0 stopped."""
    rng = np.random.default_rng(seed)
    running = np.concatenate([np.full(m * 60, on) for m, on in minutes])
    n = running.size
    rpm = np.where(running, 1480.0 + 4.0 * rng.standard_normal(n), 0.0)
    t = START + np.arange(n, dtype=np.int64) * STEP_MS
    return pd.DataFrame({"event_ms": t, "metric": "rpm", "value": np.round(rpm, 1)})


def online(detector: SeasonalBaseline, frame: pd.DataFrame, adopt: slice) -> SeasonalBaseline:
    """Score then learn in 10-second batches, as the trainer does; the rows of ``adopt`` are
    learned whatever they score (the combined detector's gate adopting a lasting move)."""
    for lo in range(0, len(frame), 10):
        part = frame.iloc[lo : lo + 10]
        alerts = detector.score(part).surprise >= S_ALERT
        rows = np.arange(lo, lo + len(part))
        alerts &= ~((rows >= adopt.start) & (rows < adopt.stop))
        detector.learn(part, exclude=alerts)
    return detector


def surprise_at(detector: SeasonalBaseline, t_ms: int, value: float) -> float:
    reading = pd.DataFrame({"event_ms": [t_ms], "metric": ["rpm"], "value": [value]})
    return float(detector.score(reading).surprise[0])


def trained() -> tuple[SeasonalBaseline, int]:
    """Running 10 minutes, stopped 10 (adopted by the gate from its 5th), running 10 again."""
    frame = machine([(10, True), (10, False), (10, True)])
    adopt = slice(15 * 60, 20 * 60)
    detector = online(SeasonalBaseline(), frame, adopt)
    return detector, int(frame.event_ms.iloc[-1])


def test_a_spike_on_a_machine_that_also_stops_is_judged_against_the_running_spread() -> None:
    detector, last = trained()
    assert detector.alt.metrics == ["rpm"], "the stopped spell is the metric's second regime"
    assert surprise_at(detector, last + STEP_MS, 1481.0) < S_ALERT
    assert surprise_at(detector, last + STEP_MS, 1930.0) >= S_ALERT, "450 rpm over, running"
    assert surprise_at(detector, last + STEP_MS, 0.0) < S_ALERT, "stopped: the other regime"
    assert surprise_at(detector, last + STEP_MS, 450.0) >= S_ALERT, "neither regime"


def test_one_regime_alone_judges_as_before() -> None:
    frame = machine([(30, True)])
    detector = online(SeasonalBaseline(), frame, slice(0, 0))
    assert detector.alt.metrics == []
    last = int(frame.event_ms.iloc[-1])
    assert surprise_at(detector, last + STEP_MS, 1930.0) >= S_ALERT
    assert surprise_at(detector, last + STEP_MS, 1481.0) < S_ALERT


def test_single_far_readings_do_not_make_a_second_regime() -> None:
    frame = machine([(30, True)])
    values = frame.value.to_numpy().copy()
    values[600::97] += 300.0  # lone shocks, learned (the gate adopting everything)
    frame = frame.assign(value=values)
    detector = online(SeasonalBaseline(), frame, slice(0, len(frame)))
    assert detector.alt.metrics == []


def test_the_second_regime_round_trips_through_the_parameters() -> None:
    detector, last = trained()
    again = SeasonalBaseline.from_params(detector.to_params())
    probe = pd.DataFrame(
        {
            "event_ms": last + STEP_MS * np.arange(1, 5),
            "metric": "rpm",
            "value": [0.0, 1481.0, 1930.0, 450.0],
        }
    )
    np.testing.assert_array_equal(detector.score(probe).surprise, again.score(probe).surprise)
    assert again.alt.metrics == ["rpm"]


def test_a_machine_first_seen_stopped_judges_its_running_noise_by_its_own_spread() -> None:
    """Stopped for 10 minutes (its speed 0, no spread at all), then running, its start adopted
    by the gate 5 minutes in: in the running regime's first readings, its spread is drawn
    toward the wider of the stopped one's and its own, so its own noise (1,480 ± 4 rpm) is
    normal. Drawn toward the stopped state's calm instead, a running spell of 5 minutes
    alerted on its own noise (its band some ±12 rpm)."""
    frame = machine([(10, False), (12, True)])
    adopt = slice(15 * 60, 15 * 60 + 3)  # the gate lets in three readings
    detector = online(SeasonalBaseline(), frame.iloc[: 15 * 60 + 10], adopt)
    assert detector.alt.metrics == ["rpm"]
    running = frame.iloc[15 * 60 + 10 : 20 * 60 + 10]
    assert (detector.score(running).surprise >= S_ALERT).sum() == 0


def test_a_regime_of_two_readings_at_its_floor_judges_once_it_knows_its_spread() -> None:
    """Stopped for 10 minutes, then running, the gate letting in only the start's first two
    readings, which read alike: the running regime's own spread is nothing yet, and the stopped
    one, at its floor, lends none. Judged by that spread, every running reading after them
    alerted, and stayed out of the regime's learning. Not judged by it until it has ``warmup``
    readings of its own, the running noise is learned; then it judges as a known regime."""
    frame = machine([(10, False), (20, True)])
    frame.loc[600:601, "value"] = 1480.0
    detector = online(SeasonalBaseline(), frame.iloc[:610], slice(600, 602))
    assert detector.alt.metrics == ["rpm"]
    assert int(detector.alt.counts[0, detector.buckets]) == 2
    running = frame.iloc[610:910]
    assert (detector.score(running).surprise >= S_ALERT).sum() == 0
    online(detector, frame.iloc[610:1800], slice(0, 0))
    assert int(detector.alt.counts[0, detector.buckets]) >= detector.warmup
    last = int(frame.event_ms.iloc[-1])
    assert surprise_at(detector, last + STEP_MS, 1481.0) < S_ALERT
    assert surprise_at(detector, last + STEP_MS, 1930.0) >= S_ALERT, "450 rpm over, running"
    assert surprise_at(detector, last + STEP_MS, 0.0) < S_ALERT, "stopped: the other regime"
