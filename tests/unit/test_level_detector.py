"""The level-shift detector and the stream tail it calibrates with: what they promise beyond the
check suite (test_detector_checks; its tail's own in test_stream_tail): a budget that
moves them, one alert for a wobbling shift, an alert that ends with its fault (its release),
adoption of a lasting step (after ``adopt_s``, and 30 readings at least), and state that
survives a round trip."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from fleetwatch.models import params
from fleetwatch.models.base import ScoringMemory
from fleetwatch.models.errors import HyperParameterError
from fleetwatch.models.level import LevelShiftDetector, _skipping, cleaned_average, moving_average
from fleetwatch.models.registry import load_params
from fleetwatch.models.tail import StreamTail

STEP_MS = 1000


def stream(values: np.ndarray, start: int = 0, step_ms: int = STEP_MS) -> pd.DataFrame:
    n = values.size
    return pd.DataFrame(
        {
            "event_ms": (start + np.arange(n)) * step_ms,
            "metric": "pressure",
            "value": values,
        }
    )


def fed(
    detector: LevelShiftDetector, values: np.ndarray, chunk: int = 50, step_ms: int = STEP_MS
) -> np.ndarray:
    """Score then learn, chunk by chunk (the caller's alerts excluded); the alerts."""
    out = []
    for lo in range(0, values.size, chunk):
        part = stream(values[lo : lo + chunk], lo, step_ms)
        alerts = detector.score(part).alert
        detector.learn(part, exclude=alerts)
        out.append(alerts)
    return np.concatenate(out)


def test_the_budget_spreads_over_the_days_readings_and_metrics() -> None:
    tail = StreamTail(2000.0)
    tail.observe(np.arange(0, 100_000, 1000, dtype=np.int64))  # a reading a second
    assert tail.interval_ms == pytest.approx(1000.0)
    one = tail.p(1.0, 10.0, 4)
    assert one == pytest.approx(1.0 / (86_400 / 10.0 * 4))
    assert tail.p(10.0, 10.0, 4) == pytest.approx(10 * one), "a larger budget, a larger p"


def test_a_lasting_shift_is_one_alert_from_its_start_to_its_end() -> None:
    rng = np.random.default_rng(2)
    values = rng.normal(10.0, 1.0, 3000)
    values[2000:2400] += 1.5 + 0.6 * np.sin(np.arange(400) / 7.0)  # a wobbling shift
    alerts = fed(LevelShiftDetector(), values)
    assert not alerts[400:2000].any(), "quiet before"
    inside = alerts[2000:2400]
    assert inside[60:].mean() > 0.95
    runs = np.flatnonzero(np.diff(alerts[1900:2600].astype(int)) == 1)
    assert runs.size == 1, "one alert, not one per wobble"
    assert not alerts[2500:].any(), "it ends with the shift"


def test_a_larger_budget_alerts_on_a_smaller_shift() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(0.0, 1.0, 3000) + 0.3 * rng.standard_t(3, 3000)
    values[2500:] += 0.9
    strict = fed(LevelShiftDetector(min_z=1.0), values.copy())
    loose = fed(LevelShiftDetector(min_z=1.0, false_alerts_per_day=1000.0), values.copy())
    assert loose[2500:].sum() > strict[2500:].sum()


def test_a_step_that_stays_is_adopted_after_adopt_s() -> None:
    rng = np.random.default_rng(4)
    values = rng.normal(5.0, 0.5, 4000)
    values[1500:] += 4.0
    alerts = fed(LevelShiftDetector(), values)  # adopt_s: 600 s by default
    assert alerts[1520:2000].all(), "alerting from the step..."
    assert not alerts[2300:].any(), "...and the new level normal once adopted"
    sooner = fed(LevelShiftDetector(adopt_s=200.0), values.copy())
    assert sooner[1520:1650].all(), "adopt_s sets when..."
    assert not sooner[1900:].any(), "...the step is adopted"
    kept = fed(LevelShiftDetector(adopt_s=None), values.copy())
    assert kept[2300:].mean() > 0.95, "without adopt_s a lasting shift stays an alert"


def test_a_slowly_read_metric_adopts_a_step_once_its_average_has_reached_it() -> None:
    rng = np.random.default_rng(4)
    values = rng.normal(5.0, 0.5, 4000)
    values[1500:] += 4.0
    detector = LevelShiftDetector()
    alerts = fed(detector, values, chunk=10, step_ms=300_000)  # every 5 minutes
    # not adopted 600 s (2 readings) after the step but 30 readings after it (the batch of 10
    # after that is the first scored with it); the step's first reading, 8 sd, moves the
    # average ALERT_Z sd of a reading (lam of them), under the threshold
    assert alerts[1501:1535].all(), "one alert from the step..."
    assert not alerts[1560:].any(), "...and none after"
    expected = detector.score(stream(np.full(5, 9.0), 4000, 300_000)).expected
    np.testing.assert_allclose(expected, 9.0, atol=0.15)


def after_a_fault(seed: int = 7) -> np.ndarray:
    """Readings of sd 1: a fault of 12 from 2000 to 2300, then a lasting step of 1.9: with the
    threshold at ``min_z`` 10 (a floor, so that the test is about the release), the step's
    ``|z|`` of about 7.4 lies between the hysteresis' 5 and the threshold."""
    rng = np.random.default_rng(seed)
    values = rng.normal(10.0, 1.0, 2500)
    values[2000:2300] += 12.0
    values[2300:] += 1.9
    return values


def test_an_alert_ends_with_its_fault_though_the_level_stays_a_little_off() -> None:
    released = fed(LevelShiftDetector(min_z=10.0), after_a_fault())
    held = fed(LevelShiftDetector(min_z=10.0, release=None), after_a_fault())
    assert released[2010:2300].all(), "the fault alerts throughout"
    assert held[2010:2300].all()
    assert held[2340:].all(), "hysteresis alone holds on to the partial return"
    # the average's lag, then the hold of 1 / lam readings: the alert ends within 40 readings
    assert not released[2340:].any(), "released once the fault is over"
    runs = np.flatnonzero(np.diff(released[1900:].astype(int)) == 1)
    assert runs.size == 1, "one alert"


def scored_in(detector: LevelShiftDetector, frame: pd.DataFrame, size: int) -> np.ndarray:
    """Alerts of ``frame`` scored as the scorer does, in batches of ``size`` carried over by its
    memory."""
    memory = ScoringMemory()
    out = []
    for lo in range(0, len(frame), size):
        part = frame.iloc[lo : lo + size]
        detector.resume(memory)
        out.append(detector.score(part).alert)
        detector.remember(part, memory)
    return np.concatenate(out)


def test_a_release_under_way_carries_over_from_one_batch_to_the_next() -> None:
    values = after_a_fault()
    detector = LevelShiftDetector(min_z=10.0)
    fed(detector, values[:2310])  # the fault's alert under way
    probe = stream(values[2310:2400], 2310)
    whole = scored_in(detector, probe, len(probe))
    assert whole[0], "the release happens within the probe"
    assert not whole[-1]
    for size in (1, 3, 7):  # the hold of 10 readings split across batches
        np.testing.assert_array_equal(scored_in(detector, probe, size), whole)


def test_parameters_and_memory_from_before_the_release_still_load() -> None:
    rng = np.random.default_rng(9)
    detector = LevelShiftDetector()
    fed(detector, rng.normal(0, 1, 1500))
    old = detector.to_params()
    old["state"]["carry"] = [row[:2] for row in old["state"]["carry"]]  # [e, alerting]
    again = load_params(params.loads(params.dumps(old)))
    assert isinstance(again, LevelShiftDetector)
    np.testing.assert_array_equal(again.carry[:, :2], detector.carry[:, :2])
    assert (again.carry[:, 2:] == 0).all()
    probe = stream(rng.normal(0, 1, 50), 1500)
    memory = ScoringMemory(levels={"pressure": list(detector.carry[0, :2])})
    again.resume(memory)
    detector.resume(ScoringMemory())
    np.testing.assert_array_equal(again.score(probe).score, detector.score(probe).score)


def test_state_round_trips_and_scores_the_same() -> None:
    rng = np.random.default_rng(5)
    detector = LevelShiftDetector()
    fed(detector, rng.normal(0, 1, 1500))
    text = params.dumps(detector.to_params())
    again = load_params(params.loads(text))
    assert params.dumps(again.to_params()) == text
    probe = stream(rng.normal(0, 1, 200) + np.r_[np.zeros(100), np.full(100, 2.0)], 1500)
    np.testing.assert_array_equal(detector.score(probe).score, again.score(probe).score)
    assert detector.score(probe).alert[150:].any()


@pytest.mark.parametrize(
    "hyper",
    [
        {"lam": 0.0},
        {"lam": 1.0},
        {"stay": 0.0},
        {"min_z": -1.0},
        {"adopt_s": 0.0},
        {"warmup": 1},
        {"release": 0.0},
        {"release": 1.5},
    ],
)
def test_bad_hyperparameters_are_refused(hyper: dict[str, float]) -> None:
    with pytest.raises(HyperParameterError):
        LevelShiftDetector(**hyper)  # type: ignore[arg-type]


@pytest.mark.parametrize("lam", [0.05, 0.5, 0.999])
def test_the_moving_average_is_the_recursion(lam: float) -> None:
    rng = np.random.default_rng(6)
    r = rng.normal(size=5000) * 100.0
    expected, e = [], -7.0
    for value in r:  # the recursion, one reading at a time
        e = (1.0 - lam) * e + lam * value
        expected.append(e)
    np.testing.assert_allclose(moving_average(r, lam, -7.0), expected, rtol=1e-12, atol=1e-9)


def test_the_cleaned_average_is_the_recursion_with_lone_far_readings_cut() -> None:
    rng = np.random.default_rng(7)
    r = rng.standard_t(2, size=3000) + np.repeat(rng.normal(0, 4, 30), 100)
    cap = rng.uniform(1.0, 4.0, r.size)
    expected, e, side = [], 0.5, 1
    for value, c in zip(r, cap, strict=True):  # one reading at a time
        low, high = min(e, 0.0) - c, max(e, 0.0) + c
        now = 1 if value > high else -1 if value < low else 0
        e += 0.1 * ((value if now in (0, side) else float(np.clip(value, low, high))) - e)
        side = now
        expected.append(e)
    got, last = cleaned_average(r, 0.1, (0.5, 1), cap)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert last == side
    for cut in (1, 17, 1500):  # in batches, carried over
        head, mid = cleaned_average(r[:cut], 0.1, (0.5, 1), cap[:cut])
        tail, _ = cleaned_average(r[cut:], 0.1, (float(head[-1]), mid), cap[cut:])
        np.testing.assert_allclose(np.concatenate([head, tail]), expected, rtol=1e-12)
    calm = rng.normal(size=500)
    plain, none = cleaned_average(calm, 0.1, (0.0, 0), np.full(500, 10.0))
    np.testing.assert_array_equal(plain, moving_average(calm, 0.1, 0.0))
    assert none == 0


def test_a_lone_far_reading_moves_the_average_a_cap_and_a_shift_counts_from_its_second() -> None:
    cap = np.full(200, 5.0)
    shock = np.zeros(200)
    shock[10] = 1e6
    assert cleaned_average(shock, 0.1, (0.0, 0), cap)[0].max() == pytest.approx(0.5)
    shift = np.full(200, 1000.0)
    followed, _ = cleaned_average(shift, 0.1, (0.0, 0), cap)
    assert followed[0] == pytest.approx(0.5)
    assert followed[1] == pytest.approx(0.9 * 0.5 + 100.0), "whole from its second reading"


def test_a_return_to_the_expected_level_is_followed_at_once() -> None:
    """Back from an average of 40 to 0: the way back is not cut, as a plain average's."""
    back = np.zeros(30)
    cleaned, _ = cleaned_average(back, 0.1, (40.0, 1), np.full(30, 5.0))
    np.testing.assert_allclose(cleaned, moving_average(back, 0.1, 40.0))


def test_heavy_tailed_shocks_do_not_lift_the_level_and_a_shift_stands_out() -> None:
    """Student-t 2 noise: lone shocks tens of times its scale are the readings' own, not a
    shift of the level, and neither lift the average nor its threshold: a lasting shift of four
    scales is found in most of ten streams."""
    found, false_rows = 0, 0
    for seed in range(11, 21):
        rng = np.random.default_rng(seed)
        values = 10.0 + rng.standard_t(2, size=6000)
        values[5000:5400] += 4.0
        alerts = fed(LevelShiftDetector(), values)
        false_rows += int(alerts[400:5000].sum())
        found += bool(alerts[5000:5400].mean() > 0.8)
    assert found >= 8
    assert false_rows <= 0.001 * 10 * 4600


def test_an_adoption_mid_batch_carries_what_a_batch_after_it_would() -> None:
    """A step adopted as the new normal within a batch: the rest of the batch is averaged on
    the new level, so a last reading back at the old level is one lone reading there, in one
    batch as in a batch split just after the adoption."""
    rng = np.random.default_rng(4)
    values = rng.normal(10.0, 1.0, 2650)
    values[2000:] += 20.0
    values[-1] = 10.0  # back at the old level, once
    before = LevelShiftDetector()
    fed(before, values[:2600])
    assert before.offset[0] == 0.0, "not adopted before the batch"
    whole = copy.deepcopy(before)
    fed_from(whole, values, 2600, 2650)
    assert whole.offset[0] != 0.0, "adopted within the batch"
    for cut in range(2601, 2650):
        split = copy.deepcopy(before)
        fed_from(split, values, 2600, cut)
        if split.offset[0] != 0.0:
            break
    fed_from(split, values, cut, 2650)
    assert split.offset[0] == whole.offset[0]
    np.testing.assert_allclose(whole.carry[0][[0, 4]], split.carry[0][[0, 4]], atol=0.01)
    assert whole.carry[0][4] == -1, "the last reading was out below"


def fed_from(detector: LevelShiftDetector, values: np.ndarray, lo: int, hi: int) -> None:
    """Readings ``lo`` to ``hi`` scored and learned as one batch."""
    part = stream(values[lo:hi], lo)
    detector.learn(part, exclude=detector.score(part).alert)


def test_older_carries_load_with_their_last_reading_within() -> None:
    rng = np.random.default_rng(9)
    detector = LevelShiftDetector()
    fed(detector, rng.normal(0, 1, 1500))
    probe = stream(rng.normal(0, 1, 40), 1500)
    new = detector.to_params()
    new["state"]["carry"] = [[*row[:4], 0.0] for row in new["state"]["carry"]]
    four = copy.deepcopy(new)
    four["state"]["carry"] = [row[:4] for row in four["state"]["carry"]]
    scored = [load_params(p).score(probe).score for p in (new, four)]
    np.testing.assert_array_equal(scored[0], scored[1])
    memory = ScoringMemory(levels={"pressure": [0.3, 0.0, 0.0, 0.0]})
    again = load_params(new)
    again.resume(memory)
    wide = again.score(probe).score
    again.resume(ScoringMemory(levels={"pressure": [0.3, 0.0, 0.0, 0.0, 0.0]}))
    np.testing.assert_array_equal(wide, again.score(probe).score)


def test_readings_skipped_leave_the_side_of_the_last_one_taken() -> None:
    r = np.array([0.0, 50.0, 50.0, 0.0, 50.0])
    cap = np.full(5, 5.0)
    skip = np.array([False, False, True, True, False])
    e, side = _skipping(r, skip, 0.1, (0.0, 0), cap)
    taken, last = cleaned_average(r[~skip], 0.1, (0.0, 0), cap[~skip])
    np.testing.assert_allclose(e, [taken[0], taken[1], taken[1], taken[1], taken[2]])
    assert side == last == 1
    assert taken[2] == pytest.approx(0.9 * taken[1] + 5.0), "out again after skipped ones: whole"
