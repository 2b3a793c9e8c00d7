"""A device's pattern break that the fleet's model knows as normal opens no alert."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fleetwatch.fleet.pca import pool_pca
from fleetwatch.models.batch import Batch
from fleetwatch.models.calibration import ALERT_SCORE
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.scores import Reason, Scores
from fleetwatch.streaming.scorer.episodes import CALM_SCORE
from fleetwatch.streaming.scorer.observations import _observation, _reverted, fleet_checked


def tied(seed: int, looseness: float, n: int = 3000, offset: float = 0.0) -> pd.DataFrame:
    """``load`` and ``volts`` tied: ``volts = load + looseness·noise``, one reading a second."""
    rng = np.random.default_rng(seed)
    load = rng.normal(size=n)
    volts = load + looseness * rng.normal(size=n) + offset
    times = np.arange(n, dtype=np.int64) * 1000
    return pd.DataFrame(
        {
            "event_ms": np.concatenate([times, times]),
            "metric": ["load"] * n + ["volts"] * n,
            "value": np.concatenate([load + offset, volts]),
        }
    )


def pooled(looseness: float) -> PcaDetector:
    """The fleet's model pooled over three devices whose ties are ``looseness`` loose, their
    levels 0.2 apart."""
    devices = {
        f"dev-{i}": PcaDetector(halflife_hours=None)
        .learn(tied(10 + i, looseness=looseness, offset=0.2 * i))
        .to_params()
        for i in range(3)
    }
    return PcaDetector.from_params(pool_pca(devices))


def probe(*volts: float) -> pd.DataFrame:
    """Readings at a usual load (0) with these volts, one second apart from t = 10^7 ms, every
    load before every volts (not in time order)."""
    times = 10_000_000 + 1000 * np.arange(len(volts), dtype=np.int64)
    frame = pd.DataFrame(
        {
            "event_ms": np.concatenate([times, times]),
            "metric": ["load"] * len(volts) + ["volts"] * len(volts),
            "value": np.concatenate([np.zeros(len(volts)), volts]),
        }
    )
    return frame


def test_a_break_the_fleet_knows_is_calm_and_one_it_does_not_still_alerts() -> None:
    # the device's tie is tight; the fleet's devices hold theirs looser
    device = PcaDetector(halflife_hours=None).learn(tied(1, looseness=0.1))
    fleet = pooled(0.6)
    # usual; a break only for the tight device, twice (a break alerts once it lasts: see
    # lasting.py); a break for both, twice
    rows = probe(0.0, 2.0, 2.0, 5.0, 5.0)
    batch = Batch.of(rows)
    own = device.score(rows)
    alerting = own.score >= ALERT_SCORE
    at = rows["event_ms"].to_numpy()
    assert set(at[alerting].tolist()) == {10_002_000, 10_003_000, 10_004_000}
    assert fleet.familiar_times(batch) == {10_000_000, 10_001_000, 10_002_000}

    checked = fleet_checked(own, at, lambda: fleet.familiar_times(batch))
    assert set(at[checked.score >= ALERT_SCORE].tolist()) == {10_003_000, 10_004_000}
    # under the alert level but not calm: it would not close an episode under way
    assert (checked.score[at == 10_002_000] == CALM_SCORE).all()
    np.testing.assert_array_equal(checked.score[at != 10_002_000], own.score[at != 10_002_000])
    # the device's own scores are not changed in place
    assert set(at[own.score >= ALERT_SCORE].tolist()) == {10_002_000, 10_003_000, 10_004_000}


def test_only_the_pattern_member_is_checked_against_the_fleet() -> None:
    fleet = PcaDetector.from_params(
        pool_pca({"a": PcaDetector(halflife_hours=None).learn(tied(3, 0.6)).to_params()})
    )
    rows = probe(0.5)
    batch = Batch.of(rows)
    n = len(batch)
    assert fleet.familiar_times(batch) == {10_000_000}
    level = Scores.build(
        "level",
        np.full(n, 50.0),
        np.full(n, "volts", object),
        rows["value"].to_numpy(),
        np.zeros(n),
        np.ones(n),
        np.full(n, Reason.SHIFT_UP, np.int8),
    )
    assert (level.score >= ALERT_SCORE).all()
    asked: list[int] = []

    def familiar() -> set[int]:
        asked.append(1)
        return fleet.familiar_times(batch)

    assert fleet_checked(level, rows["event_ms"].to_numpy(), familiar) is level
    assert asked == []  # no pattern break alerting: the fleet is not asked


def test_the_fleet_is_asked_of_a_reading_with_some_values_put_back() -> None:
    """``_reverted``: whether the fleet knows a reading with some metrics at other values (the
    device's expected ones), the rest as read."""
    fleet = pooled(0.1)
    frame = Batch.of(probe(0.0, 0.05))
    at = 10_000_000
    assert at in fleet.familiar_times(frame)
    knows = _reverted(fleet, frame)
    assert knows(at, {"volts": 0.1})
    assert not knows(at, {"volts": 3.0}), "a tie the pooled devices never show"
    assert not knows(at, {"load": 3.0})
    assert knows(at + 1000, {}), "the other reading, as read"


def test_an_observation_says_when_a_young_streams_threshold_judged_it() -> None:
    scores = Scores.build(
        "seasonal",
        np.array([20.0, 20.0]),
        np.array(["rpm", "rpm"], dtype=object),
        np.array([0.0, 0.0]),
        np.array([1480.0, 1480.0]),
        np.array([30.0, 30.0]),
        np.array([Reason.EARLY, Reason.DEVIATION], dtype=np.int8),
    )
    t = np.array([1000, 2000])
    young, grown = (_observation(scores, i, t // 1000, t, t + 5) for i in (0, 1))
    assert young.provisional
    assert "new stream" in young.reason
    assert not grown.provisional
