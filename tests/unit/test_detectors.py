"""Focused tests per detector: the mathematics and the edges the check suite does not reach."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from sklearn.decomposition import PCA

from fleetwatch.contracts.errors import ConfigurationError, FleetwatchError
from fleetwatch.models import params
from fleetwatch.models.batch import Batch
from fleetwatch.models.calibration import (
    ALERT_SCORE,
    ALERT_Z,
    S_ALERT,
    normal_two_sided_surprise,
    normal_upper_surprise,
    score_from_surprise,
)
from fleetwatch.models.change import ChangeDetector, cusum
from fleetwatch.models.combiner import default_members
from fleetwatch.models.errors import (
    BatchError,
    HyperParameterError,
    ModelError,
    ParamsError,
    UnknownDetector,
)
from fleetwatch.models.flatline import FlatlineDetector
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.registry import CombinedDetector, SeasonalBaseline, load_params
from fleetwatch.models.scores import Reason, Scores
from tests.unit import signals


def series(values: np.ndarray, interval_ms: int = 60_000, metric: str = "m") -> pd.DataFrame:
    n = values.size
    return pd.DataFrame(
        {"event_ms": np.arange(n, dtype=np.int64) * interval_ms, "metric": metric, "value": values}
    )


def test_normal_surprises_are_the_tails_of_the_standard_normal() -> None:
    z = np.linspace(-6.0, 6.0, 121)
    two_sided = -np.log([math.erfc(abs(v) / math.sqrt(2.0)) for v in z])
    upper = -np.log([0.5 * math.erfc(v / math.sqrt(2.0)) for v in z])
    np.testing.assert_allclose(normal_two_sided_surprise(z), two_sided, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(normal_upper_surprise(z), upper, rtol=1e-12, atol=1e-15)
    far = normal_two_sided_surprise(np.array([50.0, 1e6]))
    assert np.isfinite(far).all()
    assert far[0] == pytest.approx(50.0**2 / 2 + math.log(50.0 * math.sqrt(math.pi / 2)), rel=1e-6)


def test_the_alert_level_is_a_normal_deviation_of_about_4_9() -> None:
    assert pytest.approx(4.8916, abs=1e-3) == ALERT_Z
    assert float(normal_two_sided_surprise(ALERT_Z)) == pytest.approx(S_ALERT, rel=1e-6)
    assert float(score_from_surprise(S_ALERT)) == 0.5
    assert ALERT_SCORE == 0.5  # the score at the alert level: derived, and the same float


def test_scores_of_growing_deviations_grow_strictly_and_never_reach_one() -> None:
    z = np.array([5.0, 10.0, 50.0, 1e3, 1e5, 1e7])
    scores = score_from_surprise(normal_two_sided_surprise(z))
    assert (np.diff(scores) > 0).all()
    assert (scores < 1.0).all()


def naive_cusum(steps: np.ndarray, start: float, limit: float) -> tuple[np.ndarray, np.ndarray]:
    out, alarms, s = np.empty_like(steps), np.zeros(steps.size, bool), start
    for i, x in enumerate(steps):
        s = max(0.0, s + x)
        out[i] = s
        if s >= limit:
            alarms[i], s = True, 0.0
    return out, alarms


@pytest.mark.parametrize("seed", range(5))
def test_the_cumulative_sum_form_equals_the_recursion(seed: int) -> None:
    rng = np.random.default_rng(seed)
    steps = rng.normal(0.3, 1.0, 400)
    sums, alarms, end = cusum(steps, 2.0, 6.0, reset=True)
    expected, expected_alarms = naive_cusum(steps, 2.0, 6.0)
    np.testing.assert_allclose(sums, expected, atol=1e-9)
    np.testing.assert_array_equal(alarms, expected_alarms)
    assert alarms.sum() > 3
    assert end == pytest.approx(0.0 if expected_alarms[-1] else expected[-1])


@pytest.mark.parametrize("reset", [True, False])
def test_a_few_steps_at_a_time_equal_the_recursion(reset: bool) -> None:
    """Short inputs (a live batch's rows of one metric) take the one-step-at-a-time path."""
    rng = np.random.default_rng(7)
    start = 1.5
    for n in range(1, 17):
        steps = rng.normal(0.8, 2.0, n)
        sums, alarms, end = cusum(steps, start, 3.0, reset)
        s, expected, flagged = start, [], []
        for x in steps:
            s = max(0.0, s + x)
            expected.append(s)
            flagged.append(s >= 3.0)
            if s >= 3.0 and reset:
                s = 0.0
        np.testing.assert_allclose(sums, expected, atol=1e-12)
        np.testing.assert_array_equal(alarms, flagged)
        assert end == pytest.approx(s)
        start = end


def test_cusum_flags_a_three_sigma_shift_within_a_few_readings() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(10.0, 1.0, 1000)
    detector = ChangeDetector(buckets=1).learn(series(values[:700]))
    values[850:] += 3.0
    alerts = np.flatnonzero(detector.score(series(values[700:])).alert) + 700
    assert alerts.size
    assert 850 <= alerts[0] <= 858
    first = detector.score(series(values[700:]))
    assert Reason(int(first.reason[alerts[0] - 700])) == Reason.SHIFT_UP


def test_cusum_sums_carry_over_from_one_batch_to_the_next() -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(0.0, 1.0, 600)
    values[400:] += 1.0
    detector = ChangeDetector(buckets=1).learn(series(values[:300]))
    whole = detector.score(series(values[300:])[:]).surprise
    frame = series(values)
    detector.learn(frame.iloc[300:450], exclude=np.zeros(150, bool))
    after = detector.score(frame.iloc[450:]).surprise
    assert after[0] > 0  # the sum built up before 450 continues
    assert after[0] == pytest.approx(whole[150], rel=0.05)


def test_seasonal_follows_the_daily_cycle_and_warms_up_first() -> None:
    detector = SeasonalBaseline(warmup=30)
    first = signals.train().iloc[:40]
    assert not detector.learn(first.iloc[:20]).score(first).alert.any()
    assert (detector.score(first).reason == Reason.WARMUP).all()
    detector = SeasonalBaseline().learn(signals.train())
    part = signals.after_training(None)
    scores = detector.score(part)
    temp = (part.metric == "temperature").to_numpy()
    i = np.arange(signals.TRAIN, signals.TRAIN + signals.TEST)
    truth = 21.0 + 2.0 * np.sin(2 * np.pi * i / signals.DAY)
    assert np.abs(scores.expected[temp] - truth).max() < 0.35
    # the band is the stream's threshold times its spread; a young Gaussian stream's threshold
    # sits above the floor (its tail's shape is drawn toward a heavy one while it is young)
    m = detector.profile.metrics.index("temperature")
    bar = detector._bar(detector.tails[m], len(detector.profile.metrics))
    assert ALERT_Z <= bar < 1.5 * ALERT_Z
    assert scores.band[temp].mean() == pytest.approx(bar * math.hypot(0.8, 0.3), rel=0.15)


def test_flatline_ignores_a_quantised_sensor_that_repeats_values() -> None:
    rng = np.random.default_rng(2)
    values = np.round(rng.normal(20.0, 0.3, 3000))  # integer resolution, sd 0.3: many repeats
    detector = FlatlineDetector().learn(series(values[:2000]))
    assert detector.resolution[0] == 1.0
    assert not detector.score(series(values[2000:])).alert.any()


def test_flatline_reads_a_rounded_range_as_a_true_range_under_one_step_more() -> None:
    """A sensor rounding to 0.1 that flickers between two neighbouring values may have read a
    true range of almost two steps: as likely for noise of 0.3 as an alert is not. One that
    repeats one value had a true range under one step: a stuck sensor."""
    rng = np.random.default_rng(11)
    detector = FlatlineDetector().learn(series(np.round(rng.normal(20.0, 0.3, 400), 1)))
    assert detector.resolution[0] == pytest.approx(0.1)
    assert not detector.score(series(np.tile([19.8, 19.9], 15))).alert.any()
    assert detector.score(series(np.full(30, 19.8))).alert[-10:].all()


def test_a_stuck_sensor_scores_high_but_finite() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(20.0, 0.3, 600)
    detector = FlatlineDetector().learn(series(values[:400]))
    values[450:] = values[450]
    scores = detector.score(series(values[400:]))
    stuck = scores.score[60:]
    assert scores.alert[59:].all()
    assert not scores.alert[:58].any()
    assert (stuck < 1.0).all()
    assert (stuck > 0.7).all()


@pytest.mark.parametrize(("gap", "alerts"), [(3, False), (6, True), (60, True)])
def test_a_gap_alerts_past_gap_factor_typical_intervals(gap: int, alerts: bool) -> None:
    rng = np.random.default_rng(4)
    frame = series(rng.normal(0.0, 1.0, 400))
    detector = FlatlineDetector(gap_factor=5.0).learn(frame.iloc[:300])
    later = frame.iloc[300:].copy()
    later.loc[later.index[50:], "event_ms"] += (gap - 1) * 60_000
    scores = detector.score(later)
    assert bool(scores.alert[50]) is alerts
    assert scores.alert.sum() == int(alerts)
    if alerts:
        assert Reason(int(scores.reason[50])) == Reason.DROPOUT


def test_between_two_hours_of_different_kinds_either_is_expected() -> None:
    """A machine stopped through one hour and running through the next: just after the hour
    its speed is that of either hour, not a half speed with the spread of one of them."""
    hour = 3_600_000
    rng = np.random.default_rng(13)
    stopped = series(np.zeros(360), interval_ms=10_000)
    running = series(1480.0 + 4.0 * rng.normal(size=360), interval_ms=10_000)
    running["event_ms"] += hour
    detector = SeasonalBaseline().learn(pd.concat([stopped, running], ignore_index=True))
    after_the_hour = series(np.array([1480.0, 0.0, 740.0]), interval_ms=0)
    after_the_hour["event_ms"] = hour + 2 * 60_000
    scores = detector.score(after_the_hour)
    assert scores.alert.tolist() == [False, False, False]
    assert float(scores.band[0]) > 500.0
    at_the_centre = series(np.array([0.0]), interval_ms=0).assign(event_ms=hour // 2)
    assert float(detector.score(at_the_centre).band[0]) < 1.0  # the stopped hour's own spread


def test_pca_components_are_those_of_scikit_learn() -> None:
    data = signals.long(signals.wide(2000, seed=5).assign(pressure=lambda w: w.temperature * 0.5))
    data.loc[data.metric == "pressure", "value"] += np.random.default_rng(6).normal(0, 0.4, 2000)
    detector = PcaDetector(components=2, halflife_hours=None).learn(data)
    model = detector.model()
    assert model is not None
    wide = data.pivot(index="event_ms", columns="metric", values="value")[detector.metrics]
    z = (wide - wide.mean()) / wide.std(ddof=0)
    reference = PCA(n_components=2).fit(z.to_numpy())
    overlap = np.abs(reference.components_ @ model.axes)
    np.testing.assert_allclose(np.sort(overlap.max(axis=1)), [1.0, 1.0], atol=1e-6)


def two_coupled_metrics(n: int, seed: int) -> pd.DataFrame:
    """A temperature and a humidity that falls as it warms (as the simulator's sensor), tied
    (correlation about -0.89: the PCA judges the axis off their tie)."""
    rng = np.random.default_rng(seed)
    temp = 21.0 + 0.3 * rng.normal(size=n)
    humidity = 55.0 - 2.0 * (temp - 21.0) + 0.3 * rng.normal(size=n)
    times = np.arange(n, dtype=np.int64) * 60_000
    frame = pd.DataFrame({"event_ms": times, "temperature": temp, "humidity": humidity})
    return signals.long(frame)


@pytest.mark.parametrize(("metric", "offset"), [("temperature", 6.0), ("humidity", 15.0)])
def test_pca_blames_the_metric_that_moved_not_its_partner(metric: str, offset: float) -> None:
    """With two metrics the residual off the axis is the same for both; the blamed one is the
    metric that, corrected alone, explains the reading (the other is where it should be)."""
    detector = PcaDetector(halflife_hours=None).learn(two_coupled_metrics(500, seed=11))
    reading = two_coupled_metrics(502, seed=12).tail(4).copy()  # two readings, both moved
    reading.loc[reading.metric == metric, "value"] += offset
    scores = detector.score(reading)
    assert lasting_alerts(scores, reading).all()
    assert set(scores.metric) == {metric}
    moved = float(reading.loc[reading.metric == metric, "value"].iloc[0])
    assert abs(float(scores.expected[0]) - moved) > offset / 2


@pytest.mark.parametrize(
    ("metric", "partner", "offset"),
    [("temperature", "humidity", 3.0), ("humidity", "temperature", 1.5)],
)
def test_pca_weighs_what_the_metrics_own_members_found(
    metric: str, partner: str, offset: float
) -> None:
    """A break of the tie that the partner, corrected alone, explains a little better: blamed
    on the partner by the pattern alone, or told that neither metric is unusual on its own;
    told that the metric's own members found its reading far more surprising (a running
    machine's vibration that fell, its speed where it always is), blamed on that metric. The
    evidence of the break is the same: only its blame moves."""
    detector = PcaDetector(halflife_hours=None).learn(two_coupled_metrics(500, seed=11))
    reading = two_coupled_metrics(502, seed=12).tail(4).copy()
    reading.loc[reading.metric == partner, "value"] += offset
    alone = detector.score(reading)
    assert lasting_alerts(alone, reading).all()
    assert set(alone.metric) == {partner}
    assert set(detector.score(reading, np.zeros(len(reading))).metric) == {partner}
    odd = np.where(reading.metric == metric, 50.0, 0.0)
    told = detector.score(reading, odd)
    assert set(told.metric) == {metric}
    np.testing.assert_array_equal(told.score, alone.score)
    with pytest.raises(BatchError, match="suspicion has shape"):
        detector.score(reading, odd[:2])


class FindsHumidityOdd(SeasonalBaseline):
    """A per-metric member that finds every humidity reading very surprising (p ≈ 2e-22)."""

    def _score(self, batch: Batch) -> Scores:
        scores = super()._score(batch)
        odd = np.where(scores.metric == "humidity", 50.0, 0.0)
        return replace(scores, surprise=odd, score=score_from_surprise(odd))


def test_the_combined_detector_tells_its_joint_member_what_its_own_members_found() -> None:
    training = two_coupled_metrics(500, seed=11)
    reading = two_coupled_metrics(502, seed=12).tail(4).copy()
    reading.loc[reading.metric == "temperature", "value"] += 1.5
    members = [SeasonalBaseline(halflife_hours=None), PcaDetector(halflife_hours=None)]
    plain = CombinedDetector(members, adapt_s=None).learn(training).score(reading)
    odd = [FindsHumidityOdd(halflife_hours=None), PcaDetector(halflife_hours=None)]
    told = CombinedDetector(odd, adapt_s=None).learn(training).score(reading)
    assert set(plain.metric[plain.detector == PcaDetector.kind]) == {"temperature"}
    pca = told.detector == PcaDetector.kind
    assert pca.any()
    assert set(told.metric[pca]) == {"humidity"}


def lasting_alerts(scores: Scores, frame: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """The alerts of the rows after the first reading: a pattern break alerts once it has
    lasted two readings (lasting.py)."""
    times = frame["event_ms"].to_numpy()
    out: npt.NDArray[np.bool_] = scores.alert[times > times.min()]
    return out


def three_metrics(n: int, seed: int) -> pd.DataFrame:
    """:func:`two_coupled_metrics` and a pressure tied to neither."""
    rng = np.random.default_rng(seed)
    temp = 21.0 + 0.3 * rng.normal(size=n)
    frame = pd.DataFrame(
        {
            "event_ms": np.arange(n, dtype=np.int64) * 60_000,
            "temperature": temp,
            "humidity": 55.0 - 2.0 * (temp - 21.0) + 0.3 * rng.normal(size=n),
            "pressure": 1013.0 + rng.normal(size=n),
        }
    )
    return signals.long(frame)


def _alerts_from(
    detector: PcaDetector,
    frame: pd.DataFrame,
    scored_from: int,
    suspicion: npt.NDArray[np.float64] | None = None,
) -> list[int]:
    """The readings ``detector`` alerts on from ``scored_from`` on, learning 100 at a time;
    told ``suspicion`` (per row of ``signals.long(frame)``) as the scorer tells it."""
    readings = signals.long(frame)
    found: list[int] = []
    for lo in range(0, len(frame), 100):
        rows = (readings.event_ms >= lo * 10_000) & (readings.event_ms < (lo + 100) * 10_000)
        part = readings[rows]
        if lo >= scored_from:
            told = None if suspicion is None else suspicion[rows.to_numpy()]
            alerting = detector.score(part, told).alert
            found += sorted({int(t) // 10_000 for t in part.event_ms[alerting]})
        detector.learn(part)
    return found


def test_pca_judges_a_heavy_tailed_ties_one_reading_breaks_by_its_own_tail() -> None:
    frame = signals.heavy_tailed_tie(6000, seed=21, df=2)
    model_only = _alerts_from(PcaDetector(), frame, 3000)
    shocks_held = _alerts_from(PcaDetector(shock_alerts_per_day=1.0), frame, 3000)
    budget = _alerts_from(PcaDetector(false_alerts_per_day=1.0), frame, 3000)
    assert len(model_only) >= 5, "the χ² model alerts on the tie's heavy tail"
    assert len(shocks_held) < len(model_only) / 3, "its own tail of one-reading breaks does not"
    assert len(budget) < len(model_only) / 3, "nor its own tail of the whole residual"


def test_the_default_pca_member_holds_one_reading_breaks_to_the_devices_own_tail() -> None:
    frame = signals.heavy_tailed_tie(6000, seed=21, df=2)
    member = next(m for m in default_members() if isinstance(m, PcaDetector))
    model_only = _alerts_from(PcaDetector(), frame, 3000)
    assert len(_alerts_from(member, frame, 3000)) < len(model_only) / 3


def test_pca_still_alerts_on_a_spike_that_breaks_a_gaussian_tie_alone() -> None:
    frame = signals.heavy_tailed_tie(4000, seed=5, df=None)
    spikes = [3050, 3420, 3777]
    frame.loc[spikes, "humidity"] += 3.0  # 30 times the tie's noise, one reading each
    for detector in (PcaDetector(shock_alerts_per_day=1.0), PcaDetector()):
        assert _alerts_from(detector, frame, 3000) == spikes


@pytest.mark.parametrize(("own", "alerts"), [(S_ALERT / 2, True), (S_ALERT / 2 - 0.5, False)])
def test_a_one_reading_break_counts_where_the_metrics_own_members_find_it_unusual(
    own: float, alerts: bool
) -> None:
    """A spike that breaks a tie on one reading alone: told that the blamed metric's own
    members found it at least calm-level unusual (``p ≤ 1e-3``), the joint member alerts on
    it; told that they found it less, it is a shock inside that metric's own tail, theirs to
    judge. Told nothing, the joint member judges it alone."""
    frame = signals.heavy_tailed_tie(4000, seed=5, df=None)
    spikes = [3050, 3420, 3777]
    frame.loc[spikes, "humidity"] += 3.0  # 30 times the tie's noise, one reading each
    readings = signals.long(frame)
    at_spikes = (readings.metric == "humidity") & readings.event_ms.isin(
        [s * 10_000 for s in spikes]
    )
    suspicion = np.where(at_spikes, own, 0.0)
    assert _alerts_from(PcaDetector(), frame, 3000, suspicion) == (spikes if alerts else [])
    assert _alerts_from(PcaDetector(), frame, 3000) == spikes


def test_pca_judges_the_ties_between_metrics_not_a_metric_on_its_own() -> None:
    detector = PcaDetector(halflife_hours=None).learn(three_metrics(500, seed=11))
    model = detector.model()
    assert model is not None
    assert model.residual_var.size == 1  # the tie alone
    probe = three_metrics(3, seed=12)
    wandered = probe.copy()  # the untied pressure far from its mean: the per-metric members'
    wandered.loc[wandered.metric == "pressure", "value"] += 8.0
    assert not detector.score(wandered).alert.any()
    broken = probe.copy()  # humidity 3 of its standard deviations up as temperature stays
    broken.loc[broken.metric == "humidity", "value"] += 2.0
    assert lasting_alerts(detector.score(broken), broken).all()
    every_axis = PcaDetector(halflife_hours=None, max_axis_var=None)
    judged = every_axis.learn(three_metrics(500, seed=11)).score(wandered)
    assert lasting_alerts(judged, wandered).all()


def test_a_reading_only_the_joint_member_alerts_on_is_learned() -> None:
    detector = CombinedDetector().learn(three_metrics(500, seed=11))
    pca = next(m for m in detector.members() if isinstance(m, PcaDetector))
    broken = three_metrics(503, seed=12).tail(9).copy()  # 3 readings of 3 metrics
    broken.loc[broken.metric == "humidity", "value"] += 2.0
    scores = detector.score(broken)
    assert set(scores.detector[scores.alert]) == {"pca"}
    before = pca.count
    detector.learn(broken)
    assert pca.count == before + 3
    spiked = three_metrics(506, seed=13).tail(9).copy()  # a metric's own alert keeps it out
    spiked.loc[spiked.metric == "pressure", "value"] += 30.0
    assert detector.score(spiked).alert.any()
    detector.learn(spiked)
    assert pca.count == before + 3


def test_pca_needs_two_metrics_and_says_so() -> None:
    detector = PcaDetector().learn(series(np.random.default_rng(7).normal(0, 1, 200)))
    assert detector.model() is None
    assert detector.metrics == []
    assert (detector.score(series(np.ones(5))).reason == Reason.WARMUP).all()


def test_combined_takes_the_most_surprised_member_and_its_explanation() -> None:
    detector = CombinedDetector().learn(signals.train())
    part = signals.after_training("flat")
    combined = detector.score(part)
    own = [m.score(part).surprise for m in detector.detectors if m.per_metric]
    joint = [
        m.score(part, np.max(own, axis=0)).surprise for m in detector.detectors if not m.per_metric
    ]
    members = np.stack(own + joint)
    np.testing.assert_array_equal(combined.surprise, members.max(axis=0))
    first = np.flatnonzero(combined.alert)[0]
    assert combined.detector[first] == "flatline"
    assert "flat at" in combined.explain(int(first))


def test_unsorted_rows_get_their_own_scores_back() -> None:
    detector = SeasonalBaseline().learn(signals.train())
    part = signals.after_training("spike")
    shuffled = part.sample(frac=1.0, random_state=0)
    np.testing.assert_array_equal(
        detector.score(shuffled).score, detector.score(part).score[shuffled.index.to_numpy()]
    )


def test_a_wide_frame_scores_like_its_long_form() -> None:
    detector = SeasonalBaseline().learn(signals.train())
    wide = signals.wide(50, seed=8, start=signals.TRAIN)
    by_long = detector.score(signals.long(wide)).score
    assert (
        np.sort(detector.score(Batch.from_wide(wide)).score).tolist() == np.sort(by_long).tolist()
    )


def test_bad_input_and_bad_parameters_raise_typed_errors() -> None:
    with pytest.raises(BatchError, match="value"):
        SeasonalBaseline().score(pd.DataFrame({"event_ms": [1], "metric": ["m"]}))
    with pytest.raises(BatchError, match="exclude"):
        SeasonalBaseline().learn(series(np.ones(3)), exclude=np.zeros(2, bool))
    good = SeasonalBaseline().learn(series(np.ones(3))).to_params()
    with pytest.raises(ParamsError, match="kind"):
        FlatlineDetector.from_params(good)
    with pytest.raises(ParamsError, match="schema"):
        SeasonalBaseline.from_params({**good, "schema": 99})
    with pytest.raises(ParamsError, match="shape"):
        SeasonalBaseline.from_params({**good, "state": {**good["state"], "shift": [1.0, 2.0]}})
    with pytest.raises(UnknownDetector):
        load_params({**good, "kind": "oracle"})
    with pytest.raises(ParamsError):
        params.loads("[1, 2]")
    assert issubclass(UnknownDetector, FleetwatchError)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: FlatlineDetector(window=2), "window"),
        (lambda: ChangeDetector(drift=0.0), "drift"),
        (lambda: ChangeDetector(buckets=0), "buckets"),
        (lambda: PcaDetector(components=0), "components"),
        (lambda: SeasonalBaseline(min_std=0.0), "min_std"),
        (lambda: CombinedDetector([]), "at least one member"),
        (lambda: CombinedDetector(adapt_s=0.0), "adapt_s"),
        (lambda: FlatlineDetector.from_hyper({"windows": 10}), "flatline hyperparameters"),
        (lambda: CombinedDetector.from_hyper({"adapt_s": 1.0}), "combined hyperparameters"),
    ],
)
def test_every_detector_refuses_bad_hyperparameters_alike(
    make: Callable[[], object], match: str
) -> None:
    with pytest.raises(HyperParameterError, match=match) as refused:
        make()
    # a configuration error where the settings gave them, a model error from a params record
    assert isinstance(refused.value, ModelError)
    assert isinstance(refused.value, ConfigurationError)


def test_cusum_follows_a_load_cycle_faster_than_its_profile_and_still_sees_a_shift() -> None:
    """A 10-minute ±600 W cycle at one reading a second: against the hour-bucket profile alone
    the residuals run same-signed for minutes (the old reference alerted every few minutes)."""
    rng = np.random.default_rng(4)
    t = np.arange(5400)
    values = 1550.0 + 600.0 * np.sin(2 * np.pi * t / 600.0) + rng.normal(0.0, 45.0, t.size)
    values[4800:4840] += 1500.0
    frame = series(values, interval_ms=1000)
    detector = ChangeDetector()
    alerts = np.zeros(t.size, bool)
    for lo in range(0, t.size, 10):  # score then learn, 10 s batches, as the pipeline does
        part = frame.iloc[lo : lo + 10]
        alerts[lo : lo + 10] = detector.score(part).alert
        detector.learn(part, exclude=alerts[lo : lo + 10])
    assert not alerts[1800:4800].any(), np.flatnonzero(alerts[1800:4800])
    assert alerts[4800:4806].any()


def test_flatline_leaves_a_quiet_signal_that_still_moves_alone() -> None:
    """A machine at rest: the same sensor with a tenth of the noise is not stuck."""
    rng = np.random.default_rng(5)
    running = np.round(rng.normal(4.0, 0.3, 600), 3)
    resting = np.round(0.15 + 0.03 * np.abs(rng.normal(0.0, 1.0, 300)), 3)
    detector = FlatlineDetector().learn(series(running))
    assert not detector.score(series(resting)).alert.any()
    stuck = np.full(30, resting[-1])
    assert detector.score(series(np.concatenate([resting, stuck]))).alert[-5:].all()


def test_flatline_windows_of_a_few_rows_score_as_the_array_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A live batch (a few rows per metric) is scored window by window in plain floats: the
    same scores as the array path, on a noisy, a stuck and a resting stretch."""
    from fleetwatch.models import flatline

    rng = np.random.default_rng(8)
    on = np.round(rng.normal(1480.0, 4.0, 300), 1)
    detector = FlatlineDetector().learn(series(on))
    detector.learn(series(np.zeros(120)), exclude=np.zeros(120, bool))
    tail = np.concatenate([on[:40], np.full(12, on[-1]), np.zeros(12)])
    frame = series(tail)
    chunks = [frame.iloc[i : i + n] for i, n in zip(range(0, 64, 4), [4] * 16, strict=True)]
    saved = [list(t) for t in detector.tails]

    def run() -> list[np.ndarray]:
        detector.tails = [list(t) for t in saved]
        got = []
        for chunk in chunks:
            scores = detector.score(chunk)
            got.append(np.stack([scores.score, scores.observed, scores.expected, scores.band]))
            detector.tails = [[*detector.tails[0], *chunk["value"].tolist()][-detector.window :]]
        return got

    stepped = run()
    monkeypatch.setattr(flatline, "SMALL", 0)
    arrays = run()
    for a, b in zip(stepped, arrays, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, equal_nan=True)
    assert np.concatenate([a[0] for a in stepped]).max() >= 0.5  # the stuck stretch alerts


def test_a_sensor_that_often_repeats_its_reading_is_not_stuck_for_ten_repeats() -> None:
    """A flow meter that repeats half its readings: ten repeats of a value happen every few
    hundred readings, and the flat-line bound (p^(k-1), p = 0.5) keeps them under the alert
    level; the same run on a sensor that seldom repeats is a stuck one."""
    rng = np.random.default_rng(3)
    moves = np.round(rng.normal(0.0, 4.0, 2000), 2)
    sticky = 100.0 + np.cumsum(np.where(rng.random(2000) < 0.5, 0.0, moves))
    smooth = np.round(100.0 + rng.normal(0.0, 4.0, 2000), 1)
    run = np.full(12, 500.0)  # a value neither has sat on
    often = FlatlineDetector().learn(series(sticky))
    seldom = FlatlineDetector().learn(series(smooth))
    assert not often.score(series(run)).alert.any()
    assert often.score(series(run)).score.max() > 0.2  # judged, not ignored
    assert seldom.score(series(run)).alert[-3:].all()
    again = FlatlineDetector.from_params(often.to_params())  # the share survives the round trip
    np.testing.assert_allclose(again.score(series(run)).score, often.score(series(run)).score)


def test_flatline_learns_where_a_metric_rests() -> None:
    """0 rpm for minutes, learned as normal (kept rows): later runs of 0 are rest, not stuck;
    a repeat of another value still is."""
    rng = np.random.default_rng(6)
    on = np.round(rng.normal(1480.0, 4.0, 300), 1)
    detector = FlatlineDetector().learn(series(on))
    off = np.zeros(120)
    assert detector.score(series(off)).alert[9:].all()  # never seen: stuck
    detector.learn(series(off), exclude=np.zeros(off.size, bool))  # learned as normal
    assert not detector.score(series(np.zeros(60))).alert.any()
    frozen = np.full(30, on[-1])
    assert detector.score(series(frozen)).alert[-5:].all()


def _speed_with_stops(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A machine's speed: running, stopped at 0 for 60 readings, running, stopped again; and
    which readings are the first stop's."""
    on = [np.round(rng.normal(1480.0, 4.0, n), 1) for n in (300, 100, 50)]
    values = np.concatenate([on[0], np.zeros(60), on[1], np.zeros(60), on[2]])
    return values, np.arange(values.size) // 60 == 5


def test_flatline_takes_a_value_left_and_come_back_to_as_a_rest_though_never_learned() -> None:
    """A machine whose stops are all kept out of learning (they alert, or are held as a move):
    its first stop at 0 rpm is stuck; once the speed has left 0 and come back, 0 is a rest.
    A value sat on and never left (a stuck sensor) stays stuck."""
    values, _ = _speed_with_stops(np.random.default_rng(8))
    stops = values == 0
    detector = FlatlineDetector()
    frame = series(values)
    flags = []
    for lo in range(0, values.size, 20):  # scored, then learned, twenty readings at a time
        chunk = frame.iloc[lo : lo + 20]
        flags.append(detector.score(chunk).alert)
        detector.learn(chunk, exclude=stops[lo : lo + 20])
    alert = np.concatenate(flags)
    first, second = np.flatnonzero(stops)[:60], np.flatnonzero(stops)[60:]
    assert alert[first[9:]].all()
    assert not alert[second].any()
    stuck = series(np.full(30, 1481.3)).assign(event_ms=lambda f: f["event_ms"] + 10**9)
    assert detector.score(stuck).alert[-5:].all()


def test_flatline_rest_values_are_the_same_learned_in_one_batch_or_many() -> None:
    values, _ = _speed_with_stops(np.random.default_rng(9))
    exclude = values == 0
    whole = FlatlineDetector().learn(series(values), exclude=exclude)
    pieces = FlatlineDetector()
    for lo in range(0, values.size, 7):
        pieces.learn(series(values).iloc[lo : lo + 7], exclude=exclude[lo : lo + 7])
    assert whole.rests == pieces.rests
    assert whole.rests[0][0][0] == 0.0
    assert whole.rests[0][0][2] == 2.0
    assert whole.sitting == pieces.sitting == [None]
    again = FlatlineDetector.from_params(whole.to_params())
    assert again.rests == whole.rests
    assert again.sitting == whole.sitting
