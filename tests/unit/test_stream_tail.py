"""A stream's own calibration (fleetwatch.models.tail): excursions, not readings, are counted;
the threshold for a budget of false alerts a day holds whatever the shape of the noise's tail;
the seasonal detector on heavy-tailed noise keeps to its budget where a Gaussian model of the
same noise alerts all day; and the state survives a round trip, from before excursions too."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from fleetwatch.models.calibration import ALERT_Z, S_ALERT
from fleetwatch.models.seasonal import EARLY_Z, SeasonalBaseline
from fleetwatch.models.tail import (
    BIN_WIDTH,
    BINS,
    MIN_HISTORY,
    MIN_PEAKS,
    P_BODY,
    PEAK_MEMORY,
    PRIOR_WEIGHT,
    StreamTail,
    TailSummary,
    bin_of,
)

STEP_MS = 10_000
PER_DAY = 86_400_000 // STEP_MS


def warm(values: np.ndarray, halflife: float = 2000.0) -> StreamTail:
    """A tail whose body has seen ``values`` (so excursions are counted from here on)."""
    tail = StreamTail(halflife)
    tail.summary.add(values)
    tail.observe(np.arange(values.size, dtype=np.int64) * STEP_MS)
    return tail


def learned(values: np.ndarray, batches: int) -> StreamTail:
    """A tail that has learned ``values`` (all normal) in ``batches`` batches, a reading every
    ``STEP_MS``, each excursion's peak taken at most at the threshold in force (as the
    detectors do: one that alerted counts as one passing)."""
    tail = StreamTail(20_000.0)
    tail.observe(np.arange(0, 1000 * STEP_MS, STEP_MS, dtype=np.int64))
    for part in np.array_split(values, batches):
        cap = tail.threshold(1.0, 1.0, 1, 0.0) if tail.summary.weight >= MIN_HISTORY else math.inf
        tail.summary.add(part)
        tail.excursions(part, cap)
    return tail


def test_a_body_is_trusted_once_its_tail_holds_as_many_values_as_a_fit_of_peaks_needs() -> None:
    assert MIN_HISTORY * P_BODY == MIN_PEAKS
    assert MIN_HISTORY == 200.0


def test_a_long_excursion_is_one_peak_when_it_ends_and_short_ones_each_count() -> None:
    body = np.tile(np.linspace(0.0, 1.0, 10), 30)  # u is near 0.9
    tail = warm(body)
    long = np.concatenate([np.full(5, 0.1), np.full(40, 7.0), [9.0], np.full(4, 0.1)])
    tail.excursions(long)
    assert tail.peaks.sum() == pytest.approx(1.0, rel=0.01)
    assert tail.peaks[bin_of(np.asarray([9.0]))[0]] > 0.99, "its peak, once"
    short = np.where(np.arange(100) % 10 == 0, 3.0, 0.1)
    tail.excursions(short)
    assert tail.peaks.sum() == pytest.approx(11.0, rel=0.01)


def test_a_tail_knows_its_excursions_once_about_twenty_have_ended() -> None:
    tail = warm(np.tile(np.linspace(0.0, 1.0, 10), 30))
    assert not tail.knows_excursions()
    tail.excursions(np.where(np.arange(190) % 10 == 0, 3.0, 0.1))  # 19 ended
    assert not tail.knows_excursions()
    tail.excursions(np.where(np.arange(20) % 10 == 0, 3.0, 0.1))  # 21, a little decayed
    assert tail.knows_excursions()
    assert not StreamTail(2000.0).knows_excursions(), "nor a tail without a body"


def test_an_excursion_across_batches_is_one_peak_with_its_maximum() -> None:
    tail = warm(np.tile(np.linspace(0.0, 1.0, 10), 30))
    tail.excursions(np.array([0.1, 5.0, 12.0]))
    assert tail.peaks.sum() == 0.0, "still going on"
    tail.excursions(np.array([6.0, 0.1]))
    assert tail.peaks.sum() == pytest.approx(1.0, rel=0.01)
    assert tail.peaks[bin_of(np.asarray([12.0]))[0]] > 0.99


def peaks_between(low: float, high: float, extra: list[float], count: int = 30) -> StreamTail:
    """A tail whose body is known and whose ``count`` excursions peaked evenly in ``[low,
    high]``, then at each of ``extra``."""
    tail = warm(np.tile(np.linspace(0.0, 1.0, 10), 30), halflife=20_000.0)
    peaks = [*np.random.default_rng(1).uniform(low, high, count), *extra]
    tail.excursions(np.array([x for peak in peaks for x in (0.1, peak, 0.1)]))
    return tail


def test_a_few_peaks_far_beyond_a_few_dozen_are_left_out_of_the_fit_but_four_are_not() -> None:
    few = peaks_between(1.3, 8.0, []).threshold(1.0, 1.0, 1, 0.0)
    lone = peaks_between(1.3, 8.0, [45.0]).threshold(1.0, 1.0, 1, 0.0)
    assert lone < 1.1 * few, (few, lone)
    near = peaks_between(1.3, 8.0, [15.0]).threshold(1.0, 1.0, 1, 0.0)
    assert near > 1.1 * few, "a peak the others' tail reaches is the tail's"
    for far in ([45.0, 45.0], [30.0, 45.0, 45.0]):
        assert peaks_between(1.3, 8.0, far).threshold(1.0, 1.0, 1, 0.0) < 1.1 * few, far
    four = peaks_between(1.3, 8.0, [45.0] * 4).threshold(1.0, 1.0, 1, 0.0)
    assert four > 3.0 * few, "four peaks that far are the stream's tail"


def test_two_faults_past_a_light_tailed_stream_leave_its_threshold_where_it_was() -> None:
    """A Gaussian meter's voltage: some sixty excursions peaked between 2.2 and 3.2, then two
    faults a minute apart, each counted as one passing. With only a lone outlier left out of
    the fit, the two set a shape of 0.4 and a threshold four times as high, and a dip of 8.5
    standard deviations twenty minutes later was not found."""
    calm = peaks_between(2.2, 3.2, [])
    before = calm.threshold(1.0, 1.0, 1, 0.0)
    faults = peaks_between(2.2, 3.2, [7.4, 7.4]).threshold(1.0, 1.0, 1, 0.0)
    assert before < 8.5
    assert faults < 1.2 * before, (before, faults)


def test_two_faults_stay_out_of_the_fit_of_a_stream_that_knows_hundreds_of_peaks() -> None:
    """A Gaussian meter's joint residual after half an hour: 135 excursions, 41 of them in
    the fitted top, peaked under 3, then a level shift and a correlated fault at 10.4 and 5.5.
    Kept in the fit (as they were once it rested on 40 peaks or more, and as they were with
    their weight moved onto the highest peak kept), the two set a shape of 0.54 and a
    threshold of 43, and a dip at 12.3 went unfound."""
    before = peaks_between(0.4, 3.0, [], count=160).threshold(1.0, 1.0, 1, 0.0)
    faults = peaks_between(0.4, 3.0, [5.5, 10.4], count=160).threshold(1.0, 1.0, 1, 0.0)
    assert before < 8.0
    assert faults < 1.2 * before, (before, faults)
    lone = peaks_between(0.4, 3.0, [3.6], count=160).threshold(1.0, 1.0, 1, 0.0)
    assert lone > before, "a peak the others' fit reaches stays the tail's"


@pytest.mark.parametrize(
    "draw",
    [
        lambda rng, n: rng.normal(size=n),
        lambda rng, n: rng.standard_t(3, n),
        lambda rng, n: rng.standard_t(2, n),
        lambda rng, n: rng.laplace(size=n),
    ],
    ids=["normal", "student_t3", "student_t2", "laplace"],
)
def test_the_threshold_is_passed_about_budget_times_a_day(draw: object) -> None:
    """Learned from 10 days of readings every 10 s (independent: every excursion is a reading),
    the threshold for 1 alert a day is passed at most twice a day by fresh data, and not so
    rarely that it is blind (a light tail is extrapolated as exponential: conservative)."""
    rng = np.random.default_rng(7)
    tail = learned(np.abs(draw(rng, 10 * PER_DAY)), 200)  # type: ignore[operator]
    threshold = tail.threshold(1.0, 1.0, 1, 0.0)
    fresh = np.abs(draw(rng, 200 * PER_DAY))  # type: ignore[operator]
    per_day = float((fresh > threshold).mean()) * PER_DAY
    assert 0.1 <= per_day <= 2.0, (threshold, per_day)


def test_a_larger_budget_a_lower_threshold_and_the_budget_is_shared_by_the_streams() -> None:
    rng = np.random.default_rng(3)
    tail = learned(np.abs(rng.standard_t(3, 5 * PER_DAY)), 100)
    one = tail.threshold(1.0, 1.0, 1, 0.0)
    assert tail.threshold(10.0, 1.0, 1, 0.0) < one < tail.threshold(0.1, 1.0, 1, 0.0)
    assert tail.threshold(1.0, 1.0, 4, 0.0) == tail.threshold(0.25, 1.0, 1, 0.0)


def test_a_heavier_tail_sets_a_higher_threshold_and_the_floor_holds() -> None:
    rng = np.random.default_rng(0)
    light, heavy = TailSummary(2000.0), TailSummary(2000.0)
    light.add(np.abs(rng.normal(size=5000)))
    heavy.add(np.abs(rng.standard_t(2, size=5000)))
    assert heavy.threshold(1e-5, 1.0) > light.threshold(1e-5, 1.0) + 2.0
    assert light.threshold(1e-5, 9.0) == 9.0, "never below the floor"
    young = TailSummary(2000.0)
    young.add(np.ones(int(MIN_HISTORY) - 1))
    assert young.threshold(1e-6, 4.5) == 4.5, "too little history: the floor"


def test_the_surprise_never_decreases_and_is_the_history_share_in_the_body() -> None:
    rng = np.random.default_rng(1)
    tail = TailSummary(10_000.0)
    history = np.abs(rng.normal(size=20_000))
    tail.add(history)
    below = np.array([0.5, 1.0])
    shares = [(history >= x).mean() for x in below]
    np.testing.assert_allclose(np.exp(-tail.nats(below)), shares, atol=0.03)
    assert np.all(np.diff(tail.nats(np.linspace(0, 5000, 20_000))) >= 0), "never decreasing"


def test_a_tail_forgets_at_its_half_life() -> None:
    tail = TailSummary(100.0)
    tail.add(np.full(100, 1.0))
    tail.add(np.full(100, 5.0))
    ones = tail.counts[int(1.0 / BIN_WIDTH)]
    fives = tail.counts[int(5.0 / BIN_WIDTH)]
    assert ones == pytest.approx(fives / 2, rel=0.02)


def test_a_threshold_follows_excursions_that_leave_the_body_unchanged() -> None:
    """Batches with no normal reading (all excluded) still move the excursions: the threshold
    asked for after them is the one a detector loaded from the state would set."""
    rng = np.random.default_rng(4)
    tail = warm(np.abs(rng.normal(size=3000)))
    for _ in range(40):
        tail.excursions(np.abs(rng.standard_t(3, 200)))
    keep = 2.0 ** (-1.0 / (PEAK_MEMORY * 2000.0))
    tail.readings = 1.0 / (1.0 - keep)  # the count a long stream settles at: it stops moving
    before = tail.threshold(1.0, 1.0, 1, 0.0)
    for _ in range(200):
        tail.excursions(np.array([0.0, 30.0, 0.0]))  # one large excursion each, no body change
    live = tail.threshold(1.0, 1.0, 1, 0.0)
    assert live == StreamTail.load(2000.0, tail.state()).threshold(1.0, 1.0, 1, 0.0)
    assert live > before


def test_values_on_a_bins_edge_fall_in_that_bin_and_an_infinity_in_the_last() -> None:
    from fleetwatch.models.tail import EDGES

    edges = EDGES[:-1]
    assert bin_of(edges).tolist() == list(range(BINS))
    assert bin_of(np.asarray([np.inf]))[0] == BINS - 1
    tail = warm(np.abs(np.random.default_rng(5).normal(size=300)))
    tail.excursions(np.array([0.1, np.inf, 0.1]))
    assert math.isfinite(tail.peaks.sum())
    assert tail.peaks[BINS - 1] > 0


def test_the_state_round_trips_and_a_state_from_before_excursions_loads() -> None:
    rng = np.random.default_rng(2)
    tail = warm(np.abs(rng.normal(size=3000)))
    tail.excursions(np.abs(rng.standard_t(3, 3000)))
    tail.excursions(np.array([0.1, 50.0]))  # one still going on
    back = StreamTail.load(2000.0, tail.state())
    assert back.threshold(1.0, 1.0, 2, 0.0) == tail.threshold(1.0, 1.0, 2, 0.0)
    assert back.peak == 50.0
    counts = [0.0] * 128
    counts[8] = 300.0  # 300 values of 1.0 on the 128 bins of 0.125
    old: dict[str, object] = {"counts": counts, "interval_ms": 1000.0, "last_ms": 5}
    loaded = StreamTail.load(2000.0, old)
    assert loaded.summary.counts.shape == (BINS,)
    assert loaded.summary.counts[bin_of(np.asarray([1.06]))[0]] == 300.0
    assert loaded.peaks.sum() == 0.0


def heavy_tailed(days: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = int(days * PER_DAY)
    t = 1_767_225_600_000 + np.arange(n, dtype=np.int64) * STEP_MS
    return pd.DataFrame({"event_ms": t, "metric": "t", "value": 20.0 + 0.5 * rng.standard_t(2, n)})


def openings(detector: SeasonalBaseline, data: pd.DataFrame, chunk: int = 500) -> list[int]:
    """Alerts opened per day while scoring ``data`` online (score a chunk, then learn it)."""
    opened, was = [], False
    for lo in range(0, len(data), chunk):
        part = data.iloc[lo : lo + chunk]
        on = detector.score(part).surprise >= S_ALERT
        prev = np.concatenate([[was], on[:-1]])
        opened += (lo + np.flatnonzero(on & ~prev)).tolist()
        was = bool(on[-1])
        detector.learn(part)
    per_day: list[int] = np.bincount(np.asarray(opened, dtype=int) // PER_DAY, minlength=4).tolist()
    return per_day


def test_the_seasonal_detector_on_student_t_noise_keeps_to_its_budget() -> None:
    data = heavy_tailed(4, seed=5)
    gaussian = openings(SeasonalBaseline(false_alerts_per_day=None), data)
    own = openings(SeasonalBaseline(), data)
    assert sum(gaussian[1:]) > 100, "a Gaussian model of Student-t noise: alert after alert"
    assert sum(own[1:]) <= 2 * 3, f"at most twice the budget a day once learned: {own}"
    assert math.isfinite(sum(own))


def test_a_young_stream_is_judged_against_twice_the_floor_until_its_tail_is_known() -> None:
    rng = np.random.default_rng(3)
    values = 20.0 + rng.standard_t(3, 600)
    frame = pd.DataFrame(
        {"event_ms": np.arange(600, dtype=np.int64) * 1000, "metric": "m", "value": values}
    )
    young = SeasonalBaseline()
    for start in range(0, 100, 10):  # past its profile's warm-up, its tail still short
        young.learn(frame.iloc[start : start + 10])
    assert young.tails[0].summary.weight < MIN_HISTORY
    mean, std = float(np.mean(values[:100])), float(np.std(values[:100]))

    def at(z: float) -> pd.DataFrame:
        return pd.DataFrame({"event_ms": [600_000], "metric": ["m"], "value": [mean + z * std]})

    assert not young.score(at(0.8 * EARLY_Z)).alert.any()  # a normal model's 1e-6 would alert
    assert 0.8 * EARLY_Z > ALERT_Z
    assert young.score(at(1.5 * EARLY_Z)).alert.all()
    once = SeasonalBaseline().learn(frame)  # a first batch, however long, leaves its tail known
    assert once.tails[0].summary.weight >= MIN_HISTORY
    assert once.score(at(60.0)).alert.all()


def test_a_young_stream_of_single_readings_extrapolates_its_own_tail_shape() -> None:
    """Before twenty excursions are known the threshold extrapolates the body: for a statistic
    of single readings with the shape fitted to the body's top, so a heavy-tailed stream's own
    shocks are not taken for one-in-a-million events (the quantile of |t(2.5)| this far out is
    about 25); a Gaussian body fits no shape and keeps the exponential threshold; an average
    (a longer span) keeps the exponential one whatever its body."""
    fitted, exponential, gaussian = [], [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        heavy = warm(np.abs(rng.standard_t(2.5, 400)))
        calm = warm(np.abs(rng.standard_normal(400)))
        assert not heavy.knows_excursions()
        assert not calm.knows_excursions()
        p = heavy.p(1.0, 1.0, 1)
        fitted.append(heavy.threshold(1.0, 1.0, 1, 0.1))
        exponential.append(heavy.summary.threshold(p, 0.1))
        gaussian.append(calm.threshold(1.0, 1.0, 1, 0.1) / calm.summary.threshold(p, 0.1))
        averaged = heavy.summary.threshold(heavy.p(1.0, 19.0, 1), 0.1)
        assert heavy.threshold(1.0, 19.0, 1, 0.1) == averaged
    assert min(f / e for f, e in zip(fitted, exponential, strict=True)) >= 1.0
    assert np.median(fitted) > 1.2 * np.median(exponential)
    assert np.median(gaussian) < 1.05


def _t4_beyond(x: float) -> float:
    """``P(|T| > x)`` of a Student-t of 4 degrees of freedom: ``1 - 3s/2 + s³/2`` with
    ``s = x / sqrt(x² + 4)`` (its density integrated in closed form)."""
    s = x / math.sqrt(x * x + 4.0)
    return 1.0 - 1.5 * s + 0.5 * s**3


def test_a_young_heavy_tailed_stream_is_not_judged_by_a_few_dozen_values_alone() -> None:
    """Student-t (4 dof) noise at 1 Hz, 1,200 readings learned in batches of 50, two streams
    sharing a budget of one alert a day: the quantile that budget needs is about 22.5 standard
    deviations. A shape fitted from the few dozen values above the body's top rarely shows the
    tail: half of the streams fitted at most 0.58 of it, one in ten under 0.41. Drawn toward the
    prior shape (the seasonal member's tails), half reach 0.75 of it (0.86) and nine in ten half
    of it (0.65)."""
    p = 1.0 / (86_400 * 2)
    lo, hi = 1.0, 1000.0
    for _ in range(100):  # bisection for the |t4| exceeded with probability p
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t4_beyond(mid) > p else (lo, mid)
    needed = lo / math.sqrt(2.0)  # in standard deviations (t4's variance is 2)
    with_prior: list[float] = []
    without: list[float] = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        z = np.abs(rng.standard_t(4, 1200)) / math.sqrt(2.0)
        for prior, out in ((PRIOR_WEIGHT, with_prior), (0.0, without)):
            tail = StreamTail(2000.0, prior)
            tail.summary.add(z[:200])
            tail.observe(np.arange(200, dtype=np.int64) * 1000)
            for start in range(200, z.size, 50):
                part = z[start : start + 50]
                cap = tail.threshold(1.0, 1.0, 2, ALERT_Z)
                tail.summary.add(part)
                tail.excursions(part, cap)
                tail.observe(np.arange(start, start + part.size, dtype=np.int64) * 1000)
            out.append(tail.threshold(1.0, 1.0, 2, ALERT_Z) / needed)
    assert np.median(with_prior) >= 0.75
    assert np.quantile(with_prior, 0.1) >= 0.5
    assert np.median(without) < 0.75, "the moments of a few dozen values alone"


def test_an_excursion_past_the_threshold_counts_as_one_passing_not_at_its_peak() -> None:
    """A fault's excursion far past the threshold in force adds one passing, its peak taken
    no further than a passing reaches once in ``PASSING_ODDS`` under the stream's own tail: the
    threshold moves a little, as for one false alert, where four such faults' own peaks (more
    than the few a fit leaves out) would have multiplied it (the stream blind to faults of its
    size for as long as it remembers peaks); below the threshold, or without one, a peak is
    taken as it is."""
    rng = np.random.default_rng(5)
    body = np.abs(rng.standard_normal(1500))
    raw, censored = warm(body), warm(body)
    for part in np.array_split(np.abs(rng.standard_normal(3000)), 30):
        cap = censored.threshold(1.0, 1.0, 1, 0.0)
        raw.excursions(part)
        censored.excursions(part, cap)
    assert censored.knows_excursions()
    before = censored.threshold(1.0, 1.0, 1, 0.0)
    assert before == raw.threshold(1.0, 1.0, 1, 0.0), "no passing yet: the same tail"
    fault = np.concatenate([[0.0], np.full(30, 60.0), [0.0]])
    raw.excursions(fault)
    censored.excursions(fault, before)
    after = censored.threshold(1.0, 1.0, 1, 0.0)
    assert before < after < 1.5 * before
    assert censored.peaks[bin_of(np.asarray([60.0]))[0]] == 0.0, "not at the fault's peak"
    assert raw.threshold(1.0, 1.0, 1, 0.0) < 1.1 * before, "a lone far peak left out of the fit"
    for _ in range(3):  # four such faults are more than a few left out: the fit's own
        raw.excursions(fault)
        censored.excursions(fault, censored.threshold(1.0, 1.0, 1, 0.0))
    assert raw.threshold(1.0, 1.0, 1, 0.0) > 3.0 * censored.threshold(1.0, 1.0, 1, 0.0)
    under = warm(body)
    under.excursions(np.array([0.0, 3.0, 0.0]), 5.0)
    assert under.peaks[bin_of(np.asarray([3.0]))[0]] > 0.99, "under the cap: as it is"
