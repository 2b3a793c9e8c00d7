"""The joint member alerts on a pattern break that lasts, not on one reading's shock."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fleetwatch.models.base import ScoringMemory
from fleetwatch.models.batch import Batch
from fleetwatch.models.calibration import ALERT_SCORE, S_ALERT
from fleetwatch.models.lasting import CARRIED, SINGLE, WINDOW, chi2_deviate, energy_cap, lasting
from fleetwatch.models.multivariate import PcaDetector
from tests.unit.test_fleet_checked import probe, tied


def test_one_shock_is_held_to_its_neighbours_and_two_in_a_row_alert() -> None:
    surprise = np.array([1.0, 30.0, 1.0, 40.0, 30.0, 1.0])
    out, _ = lasting(surprise, np.ones(6), [], 1, window=False)
    np.testing.assert_array_equal(out, [1.0 / SINGLE, 10.0, 1.0, 40.0 / SINGLE, 30.0, 1.0])
    assert (out[[1, 3]] < S_ALERT).all(), "a shock of one reading alone is no alert"
    out, _ = lasting(surprise[1:], np.ones(5), [20.0], 1, window=False)
    np.testing.assert_array_equal(out, [20.0, 1.0, 40.0 / SINGLE, 30.0, 1.0])


def test_a_break_beyond_doubt_alerts_on_one_reading_and_ranks() -> None:
    surprise = np.array([1.0, 3.0 * S_ALERT, 1.0, 1.0, 300.0, 1.0])
    out, _ = lasting(surprise, np.ones(6), [1.0], 1, window=True)
    assert out[1] == S_ALERT
    assert out[4] > out[1]
    assert (out[[0, 2, 3, 5]] < S_ALERT).all()


def test_what_is_carried_makes_batches_score_as_one() -> None:
    rng = np.random.default_rng(3)
    energy = rng.chisquare(1, 40) * np.where(np.arange(40) > 25, 6.0, 1.0)
    surprise = rng.exponential(3.0, 40)
    whole, left = lasting(surprise, energy, [], 1, window=True)
    parts: list[np.ndarray] = []
    carried: list[float] = []
    for lo, hi in [(0, 7), (7, 8), (8, 30), (30, 40)]:
        out, carried = lasting(surprise[lo:hi], energy[lo:hi], carried, 1, window=True)
        assert len(carried) <= CARRIED
        parts.append(out)
    np.testing.assert_allclose(np.concatenate(parts), whole, rtol=1e-12)
    assert carried == left


def test_a_moderate_break_on_every_reading_alerts_within_the_window() -> None:
    # each reading's energy alone is p ≈ 4e-4 under χ²(1): no reading alerts on its own
    energy = np.full(30, 12.5)
    one = np.full(30, -np.log(4e-4))
    assert (one < S_ALERT).all()
    out, _ = lasting(one, energy, [], 1, window=True)
    first = int(np.argmax(out >= S_ALERT))
    assert out[first] >= S_ALERT
    assert first < WINDOW


def test_one_huge_shock_adds_at_most_the_cap_to_the_window() -> None:
    energy = np.ones(2 * WINDOW)
    energy[WINDOW] = 1e9
    one = np.zeros(2 * WINDOW)
    one[WINDOW] = 30.0  # under the bar of a break of one reading alone
    out, _ = lasting(one, energy, [], 2, window=True)
    assert (out < S_ALERT).all()
    _, carried = lasting(one[: WINDOW + 1], energy[: WINDOW + 1], [], 2, window=True)
    assert carried[-1] == energy_cap(2)
    # the cap is the energy a reading passes once in a thousand
    assert abs(float(chi2_deviate(np.array([energy_cap(2)]), 2)[0]) - 3.0902) < 1e-4


def frame_of(volts: list[float], start_s: int) -> pd.DataFrame:
    rows = probe(*volts)
    shift = (start_s - 10_000) * 1000
    return rows.assign(event_ms=rows["event_ms"] + shift)


def test_the_scorer_carries_a_break_from_one_batch_into_the_next() -> None:
    readings = tied(1, looseness=0.1)
    early = readings["event_ms"] < 1_500_000
    device = PcaDetector(halflife_hours=None).learn(readings[early]).learn(readings[~early])
    assert device.last, "the parameters carry what their last readings leave"
    memory = ScoringMemory()
    first = frame_of([0.0, 0.0, 2.0], 10_000)  # a break on its last reading
    device.resume(memory)
    assert not (device.score(first).score >= ALERT_SCORE).any()
    device.remember(first, memory)
    assert memory.joint
    assert len(memory.joint) <= CARRIED

    second = frame_of([2.0, 0.0], 10_003)  # the break goes on into the next batch
    device.resume(memory)
    carried = device.score(second).score >= ALERT_SCORE
    assert carried[second["event_ms"].to_numpy() == 10_003_000].all()
    assert not carried[second["event_ms"].to_numpy() == 10_004_000].any()

    # without that memory, from the parameters' own last readings (calm): one reading, no alert
    device.resume(ScoringMemory())
    assert not (device.score(second).score >= ALERT_SCORE).any()


def test_what_the_parameters_carry_is_the_same_judged_or_not() -> None:
    readings = tied(4, looseness=0.1, n=400)
    times = readings["event_ms"].to_numpy()
    first, second = readings[times < 200_000], readings[times >= 200_000]
    second = second.assign(value=second["value"] + np.where(second["metric"] == "volts", 0.4, 0))
    judged = PcaDetector(halflife_hours=None).learn(first)
    alone = PcaDetector.from_params(judged.to_params())
    batch = Batch.of(second)  # as file mode and the trainer's gate do: judged, then learned
    judged.score(batch)
    judged.learn(batch)
    alone.learn(second)
    assert len(alone.last) == CARRIED
    np.testing.assert_allclose(alone.last, judged.last, rtol=1e-12)
    assert alone.last[0] > 1.0, "the break of the tie is carried"
