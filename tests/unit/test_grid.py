"""Reading grids (fleetwatch.models.grid): the step of a quantised metric is learned online
and floors every member's spread, so a whole-per-cent level that flickers between two values
stops alerting, while a real step of a few grid values still does."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from fleetwatch.models import grid
from fleetwatch.models.calibration import S_ALERT
from fleetwatch.models.change import ChangeDetector
from fleetwatch.models.combiner import CombinedDetector
from fleetwatch.models.grid import Grid, _written
from fleetwatch.models.level import LevelShiftDetector
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.registry import load_params
from fleetwatch.models.seasonal import SeasonalBaseline

START = 1_767_225_600_000
STEP_MS = 10_000
PER_DAY = 86_400_000 // STEP_MS


def learned_step(values: np.ndarray, chunks: int = 1) -> float:
    g = Grid()
    g.grow(1)
    for part in np.array_split(np.asarray(values, float), chunks):
        g.learn(0, part)
    return float(g.confirmed()[0])


def test_whole_numbers_that_flicker_sit_on_a_grid_of_one() -> None:
    rng = np.random.default_rng(0)
    assert learned_step(np.round(54.3 + 0.3 * rng.standard_normal(500))) == 1.0


def test_a_decimal_grid_is_found_despite_float_rounding() -> None:
    rng = np.random.default_rng(1)
    values = np.round(21.0 + 0.4 * rng.standard_normal(500), 1)
    assert learned_step(values) == pytest.approx(0.1, rel=1e-9)
    assert learned_step(np.round(230.0 + 0.5 * rng.standard_normal(500), 1) * 1.0) == (
        pytest.approx(0.1, rel=1e-9)
    )


def test_a_coarse_first_candidate_is_refined_to_the_common_step() -> None:
    values = np.array([4.0, 7.0, 9.0, 12.0, 14.0] * 10)  # rises by 3 and by 2: a grid of 1
    assert learned_step(values) == 1.0


def test_a_continuous_signal_has_no_grid() -> None:
    rng = np.random.default_rng(2)
    assert learned_step(20.0 + rng.standard_normal(2000)) == 0.0
    assert learned_step(20.0 + rng.standard_t(2, 2000)) == 0.0


def test_a_few_readings_off_the_grid_do_not_lose_it() -> None:
    rng = np.random.default_rng(3)
    values = np.round(32.0 + 0.6 * rng.standard_normal(1000))
    odd = rng.random(1000) < 0.02
    values[odd] += rng.uniform(0.05, 0.95, odd.sum())
    assert learned_step(values) == 1.0


def test_too_few_differences_confirm_nothing() -> None:
    assert learned_step(np.array([1.0, 2.0, 1.0, 2.0])) == 0.0


def test_a_level_that_moves_a_step_at_a_time_confirms_its_grid_after_four_moves() -> None:
    # a charge level that drops a per cent every few minutes: ten moves took most of an hour,
    # and each of its first moves alerted against the spread of a level that had sat still
    values = np.repeat([80.0, 79.0, 78.0, 77.0, 76.0], 30)
    assert learned_step(values[:90]) == 0.0
    assert learned_step(values) == 1.0


def test_until_a_step_is_confirmed_the_last_decimal_written_is_the_step_used() -> None:
    g = Grid()
    g.grow(4)
    g.learn(0, np.full(200, 80.0))  # a level that has not moved: whole numbers
    g.learn(1, np.full(200, 0.2))
    g.learn(2, np.array([20.0, 20.1]))  # one move: the candidate is finer than 20.1's decimal
    g.learn(3, 20.0 + np.random.default_rng(1).standard_normal(50))  # continuous
    assert g.confirmed().tolist() == [0.0, 0.0, 0.0, 0.0]
    assert g.steps()[:3] == pytest.approx([1.0, 0.1, 0.1])
    assert g.steps()[3] == 0.0
    assert Grid().steps().size == 0


def test_the_decimals_written_go_as_fine_as_float64_tells_them_and_no_finer() -> None:
    assert _written(0.25) == 0.01
    assert _written(0.1 + 0.2) == 0.1, "float rounding of a sum is not a decimal"
    assert _written(0.0012345678901) == pytest.approx(1e-13), "finer than nine decimals"
    assert _written(1e8 + 0.25) == 0.01
    # a hundred million and nine decimals: float64 holds about seven of them, so no decimal is
    # told (a fixed nine decimals found 1e-7, a digit float64 does not hold)
    assert _written(1e8 + 0.123456789) == 0.0
    assert _written(float("nan")) == 0.0
    assert _written(0.0) == 1.0


def test_learning_in_pieces_gives_the_state_of_one_batch() -> None:
    rng = np.random.default_rng(4)
    values = np.round(10.0 + 0.7 * rng.standard_normal(3000))
    values[::97] += 0.37  # some off the grid, so the step-by-step path runs too
    one, many = Grid(), Grid()
    one.grow(1)
    many.grow(1)
    one.learn(0, values)
    for part in np.array_split(values, 13):
        many.learn(0, part)
    np.testing.assert_allclose(many.rows, one.rows, rtol=1e-9)


def test_the_state_goes_through_json_and_older_parameters_have_none() -> None:
    g = Grid()
    g.grow(2)
    g.learn(0, np.round(np.linspace(0, 40, 200)))
    again = Grid.load(json.loads(json.dumps(g.state())), 2)
    np.testing.assert_array_equal(again.rows[0], g.rows[0])
    assert math.isnan(again.rows[1, 3])
    empty = Grid.load(None, 3)
    assert empty.rows.shape == (3, grid.WIDTH)
    assert not empty.steps().any()


def test_floor_and_shrink() -> None:
    np.testing.assert_allclose(grid.floor_std([0.01, 2.0], [1.0, 1.0]), [0.5, 2.0])
    np.testing.assert_allclose(grid.shrink([-2.0, 0.3, 1.5], [1.0, 1.0, 0.0]), [-1.5, 0.0, 1.5])


# -- the members on a quantised metric ---------------------------------------------------------


def charge(days: float, seed: int, step_at: int | None = None, size: float = 0.0) -> pd.DataFrame:
    """A fuel gauge: charge at 54.0 % with a little heavy-tailed noise, read in whole per cent
    (so it sits on 54 and now and then flickers to 53 or 55), and its voltage in mV."""
    rng = np.random.default_rng(seed)
    n = int(days * PER_DAY)
    t = START + np.arange(n, dtype=np.int64) * STEP_MS
    level = np.full(n, 54.0)
    if step_at is not None:
        level[step_at:] += size
    soc = np.round(level + 0.2 * rng.standard_t(6, n) / math.sqrt(1.5))
    volts = np.round((3.786 + 0.005 * rng.standard_normal(n)) * 1000) / 1000
    return pd.DataFrame(
        {
            "event_ms": np.repeat(t, 2),
            "metric": np.tile(["soc_pct", "battery_v"], n),
            "value": np.column_stack([soc, volts]).ravel(),
        }
    )


def opened(detector: CombinedDetector | SeasonalBaseline | PcaDetector, data: pd.DataFrame) -> int:
    """Alert openings of ``soc_pct`` scored online (score a chunk, then learn it)."""
    count, was = 0, False
    for lo in range(0, len(data), 200):
        part = data.iloc[lo : lo + 200]
        on = detector.score(part).surprise[(part.metric == "soc_pct").to_numpy()] >= S_ALERT
        count += int((on & ~np.concatenate([[was], on[:-1]])).sum())
        was = bool(on[-1])
        detector.learn(part)
    return count


@pytest.mark.parametrize(
    "make", [SeasonalBaseline, PcaDetector, LevelShiftDetector, ChangeDetector, CombinedDetector]
)
def test_a_quantised_stationary_stream_opens_at_most_a_few_alerts_a_day(make: type) -> None:
    data = charge(3.0, seed=4)
    detector = make()
    detector.learn(data.iloc[: PER_DAY // 2])  # half a day to learn
    rest = data.iloc[PER_DAY // 2 :]
    assert opened(detector, rest) <= 2 * 2.5  # 2.5 days


def test_without_the_grid_the_same_stream_alerts_all_day(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the floor is for: the charge sits on one value, so its learned spread is far below
    a rounding's, and every flicker is an alert (the seasonal model alone: no budget, no tail
    of its own, which would hide it)."""
    data = charge(1.5, seed=4)
    learn, rest = data.iloc[: PER_DAY // 2], data.iloc[PER_DAY // 2 :]
    floored = SeasonalBaseline(false_alerts_per_day=None).learn(learn)
    learned = floored.profile.moments(floored.min_std)[1][0]
    assert np.nanmin(learned) < grid.GRID_SD
    bare = SeasonalBaseline(false_alerts_per_day=None).learn(learn)
    assert opened(floored, rest) <= 2
    monkeypatch.setattr(Grid, "steps", lambda self: np.zeros(self.rows.shape[0]))
    assert opened(bare, rest) > 20


@pytest.mark.parametrize(
    "make", [SeasonalBaseline, LevelShiftDetector, ChangeDetector, CombinedDetector]
)
def test_a_real_step_of_a_few_grid_values_still_alerts(make: type) -> None:
    at = PER_DAY
    data = charge(1.2, seed=5, step_at=at, size=-3.0)
    detector = make()
    detector.learn(data.iloc[: 2 * at])
    after = data.iloc[2 * at : 2 * (at + 60)]
    flagged = detector.score(after).alert[(after.metric == "soc_pct").to_numpy()]
    assert flagged[:30].any(), "a 3 % drop of the charge went unflagged"


def test_parameters_without_a_grid_load_and_learn_one() -> None:
    """Parameters written before grids load, score and learn."""
    data = charge(0.5, seed=6)
    detector = CombinedDetector().learn(data)
    params = detector.to_params()
    for member in params["state"]["members"]:
        member["state"].pop("grid", None)
    older = load_params(json.loads(json.dumps(params)))
    assert isinstance(older, CombinedDetector)
    later = charge(0.5, seed=7)
    later["event_ms"] += 86_400_000 // 2
    assert not older.score(later).alert.all()
    older.learn(later)
    seasonal = older.members()[0]
    assert isinstance(seasonal, SeasonalBaseline)
    assert seasonal.grid.steps()[seasonal.profile.metrics.index("soc_pct")] == 1.0


def test_a_charge_two_per_cent_off_its_level_is_not_an_alert_but_six_are() -> None:
    """A stream on one or two values of its grid knows nothing of its noise below the step:
    its spread is floored at half a step, so a lone reading two steps off (a burst's shock)
    is 3 of them off, not the 5.2 of a rounding's spread that passed every threshold's floor;
    a fault of six steps still alerts."""
    data = charge(0.5, seed=4)
    detector = SeasonalBaseline()
    for lo in range(0, len(data), 200):  # learned online, as the trainer does
        detector.learn(data.iloc[lo : lo + 200])
    t = int(data.event_ms.iloc[-1]) + STEP_MS
    for off, alerts in ((2.0, False), (6.0, True)):
        frame = pd.DataFrame({"event_ms": [t], "metric": ["soc_pct"], "value": [54.0 + off]})
        assert bool(detector.score(frame).alert[0]) is alerts, f"{off:g} steps off"


def test_a_step_so_small_the_next_difference_overflows_it_is_walked_off() -> None:
    # a first difference of the smallest subnormal float, then an ordinary one: d / step is
    # infinite, which no whole number of steps is; the grid moves on instead of raising
    step, on, off, last = grid._learned(np.array([0.0, 0.0, 0.0, np.nan]), np.array([0, 5e-324, 1]))
    assert (step, last) == (1.0, 1.0)
    assert math.isfinite(on)
    assert math.isfinite(off)
