"""The level, seasonal and joint members' tails pooled over a fleet, and a young stream held to
them."""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pytest

from fleetwatch.fleet.model import metrics_of
from fleetwatch.fleet.publish import pooled_by_scope
from fleetwatch.fleet.tails import POOLED_FROM, field_of, pool_tails, tails_of
from fleetwatch.models.base import Detector
from fleetwatch.models.level import UNBACKED, LevelShiftDetector
from fleetwatch.models.multivariate import JOINT_TAIL, PcaDetector
from fleetwatch.models.params import dumps
from fleetwatch.models.registry import default_detector
from fleetwatch.models.seasonal import EARLY_Z, SeasonalBaseline
from fleetwatch.models.tail import MIN_HISTORY, StreamTail, bin_of
from fleetwatch.streaming.scorer.detectors import borrow_tails, fleet_model

STEP_MS = 1000
D = TypeVar("D", bound=Detector)


def taught(detector: D, values: np.ndarray, chunk: int = 50) -> D:
    """``detector`` after it scored then learned ``values`` (a reading a second), chunk by
    chunk, its alerts kept out of what it learned."""
    for lo in range(0, values.size, chunk):
        part = values[lo : lo + chunk]
        frame = pd.DataFrame(
            {"event_ms": (lo + np.arange(part.size)) * STEP_MS, "metric": "p", "value": part}
        )
        detector.learn(frame, exclude=detector.score(frame).alert)
    return detector


def fed(values: np.ndarray) -> LevelShiftDetector:
    return taught(LevelShiftDetector(), values)


def seasonal_fed(values: np.ndarray) -> SeasonalBaseline:
    return taught(SeasonalBaseline(), values)


def reading_between(detector: SeasonalBaseline, at: int, low: float, high: float) -> pd.DataFrame:
    """The ``at``-th reading, midway between ``low`` and ``high`` deviations of its profile."""
    mean, std, _ = detector.profile.expect(
        np.zeros(1, dtype=np.int64), np.array([at * STEP_MS]), 1, 1, detector.min_std
    )
    value = float(mean[0] + 0.5 * (low + high) * std[0])
    return pd.DataFrame({"event_ms": [at * STEP_MS], "metric": "p", "value": [value]})


def level_pool(devices: list[LevelShiftDetector]) -> dict[str, StreamTail]:
    return tails_of(pool_tails([d.to_params() for d in devices]))["level"]


def heavy(n: int, seed: int) -> np.ndarray:
    """Student-t (2 dof) noise: its average strays further than a Gaussian's."""
    return 10.0 + np.random.default_rng(seed).standard_t(2, n)


def test_the_streams_are_summed_their_alerts_left_out_and_the_newest_ones_skipped() -> None:
    """Two streams pooled (of three or more, the widest is left out: ``test_fleet_robust``),
    each histogram weighing at most the median stream's."""
    grown = fed(heavy(3000, 1))
    alerted = grown.own_threshold(grown.tails[0], 1)
    grown.tails[0].peaks[int(bin_of(3.0 * alerted))] += 1.0  # an alert's excursion
    grown.tails[0].changes += 1
    young = fed(heavy(100, 3))
    assert POOLED_FROM <= young.tails[0].summary.weight < MIN_HISTORY
    newest = fed(heavy(60, 4))
    assert newest.tails[0].summary.weight < POOLED_FROM
    pooled = pool_tails([d.to_params() for d in [grown, young, newest]])[field_of("level")]
    assert list(pooled) == ["p"]
    tail = StreamTail.load(float(pooled["p"]["halflife"]), pooled["p"])
    bodies = [d.tails[0].summary for d in [grown, young]]
    median = float(np.median([b.weight for b in bodies]))
    counts = sum(b.counts * min(1.0, median / b.weight) for b in bodies)
    assert np.allclose(tail.summary.counts, counts), "the young body is in the sum, not the newest"
    assert tail.summary.weight == pytest.approx(median + young.tails[0].summary.weight), (
        "the grown body weighs as the median stream's (of two, their mean), the young its own"
    )
    assert young.tails[0].readings == 0.0, "a young tail has counted no excursions"
    assert tail.readings == pytest.approx(grown.tails[0].readings)
    assert tail.interval_ms == pytest.approx(1000.0, rel=0.01)
    own = grown.own_threshold(grown.tails[0], 1)
    assert int(bin_of(3.0 * alerted)) >= int(bin_of(own)), "the alert's peak passes the threshold"
    assert tail.peaks[int(bin_of(own)) :].sum() == 0.0, "no alert is in the pool"
    below = grown.tails[0].peaks[: int(bin_of(own))].sum()
    assert tail.peaks.sum() == pytest.approx(below), "every peak below it is"


def test_a_stream_is_held_to_the_fleet_tail_at_any_age() -> None:
    pooled = level_pool([fed(heavy(4000, s)) for s in range(4)])
    young = fed(np.random.default_rng(9).normal(10.0, 1.0, 300))
    tail = young.tails[0]
    assert tail.summary.weight >= MIN_HISTORY
    assert not tail.knows_excursions()
    own = young.own_threshold(tail, 1)
    fleet = young.own_threshold(pooled["p"], 1)
    assert fleet > own, "the heavy-tailed fleet's averages stray further than 300 readings show"
    young.borrow_tails(pooled)
    assert young._threshold(0, 1) == fleet
    young.borrow_tails({"other": pooled["p"]})
    unbacked = max(own, UNBACKED * young.min_z)
    assert young._threshold(0, 1) == unbacked != fleet, "another metric's tail is not this one's"
    young.borrow_tails({})
    assert young._threshold(0, 1) == own, "without a fleet model, its own"

    grown = fed(np.random.default_rng(9).normal(10.0, 1.0, 4000))
    assert grown.tails[0].knows_excursions()
    alone = grown.own_threshold(grown.tails[0], 1)
    grown.borrow_tails(pooled)
    held = grown.own_threshold(pooled["p"], 1)
    assert held > alone, "a Gaussian stream's own excursions set a lower threshold than the pool's"
    assert grown._threshold(0, 1) == held, "a stream that knows its excursions is held to it too"
    grown.borrow_tails(level_pool([fed(np.random.default_rng(5).normal(0.0, 1.0, 320))]))
    assert grown._threshold(0, 1) == alone, "a pool that knows no excursions leaves it its own"


def test_a_fleet_that_knows_no_excursions_yet_holds_a_young_stream_to_twice_its_floor() -> None:
    assert UNBACKED == 2.0
    started_together = [fed(heavy(320, s)) for s in range(4)]
    assert all(d.tails[0].summary.weight >= MIN_HISTORY for d in started_together)
    pooled = level_pool(started_together)
    assert not pooled["p"].knows_excursions()
    young = started_together[0]
    own = young.own_threshold(young.tails[0], 1)
    assert own < UNBACKED * young.min_z, "a few hundred values of an average set a low threshold"
    young.borrow_tails(pooled)
    assert young._threshold(0, 1) == UNBACKED * young.min_z
    sd = young._scale(0)
    step = 0.5 * (own + UNBACKED * young.min_z) * sd
    frame = pd.DataFrame(
        {"event_ms": (320 + np.arange(60)) * STEP_MS, "metric": "p", "value": 10.0 + step}
    )
    assert not young.score(frame).alert.any()
    young.borrow_tails({})
    assert young.score(frame).alert.any(), "without a fleet model, its own threshold"


def test_a_young_streams_alert_below_the_fleet_threshold_is_not_raised() -> None:
    pooled = level_pool([fed(heavy(4000, s)) for s in range(4)])
    young = fed(np.random.default_rng(9).normal(10.0, 1.0, 300))
    own, fleet = young.own_threshold(young.tails[0], 1), young.own_threshold(pooled["p"], 1)
    sd = young._scale(0)
    step = 0.5 * (own + fleet) * sd  # past the young stream's own threshold, short of the fleet's
    frame = pd.DataFrame(
        {"event_ms": (300 + np.arange(60)) * STEP_MS, "metric": "p", "value": 10.0 + step}
    )
    assert young.score(frame).alert.any()
    young.borrow_tails(pooled)
    assert not young.score(frame).alert.any()


def learned(metrics: dict[str, float], seed: int, n: int = 400) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    rows = [
        {"event_ms": i * 1000, "metric": m, "value": v + rng.normal(0, 0.5)}
        for i in range(n)
        for m, v in metrics.items()
    ]
    detector = default_detector()
    frame = pd.DataFrame(rows)
    for lo in range(0, n, 100):  # batch by batch, as the trainer learns
        detector.learn(frame[frame["event_ms"].between(lo * 1000, (lo + 99) * 1000)])
    return {"device_id": f"d{seed}", "params": detector.to_params()}


def test_the_fleet_model_carries_the_pooled_tails_to_the_scorer() -> None:
    table = {f"d{s}": learned({"temperature": 21.0, "humidity": 40.0}, s) for s in range(3)}
    ((params, devices),) = pooled_by_scope(table).values()
    assert devices == 3
    for kind in ("level", "seasonal"):
        assert sorted(params[field_of(kind)]) == ["humidity", "temperature"]
    assert list(params[field_of(PcaDetector.kind)]) == [JOINT_TAIL]
    champion = fleet_model("fleet-h/1", dumps(params))
    assert champion is not None
    assert sorted(champion.tails["seasonal"]) == ["humidity", "temperature"]
    assert metrics_of(None, tails_of(params)) == ["humidity", "temperature"], "not a metric"
    members = table["d0"]["params"]["state"]["members"]
    level = LevelShiftDetector.from_params(next(m for m in members if m["kind"] == "level"))
    seasonal = SeasonalBaseline.from_params(next(m for m in members if m["kind"] == "seasonal"))
    joint = PcaDetector.from_params(next(m for m in members if m["kind"] == PcaDetector.kind))
    borrow_tails([(level, None), (seasonal, None), (joint, None)], champion)
    assert level._fleet is champion.tails["level"]
    assert seasonal._fleet is champion.tails["seasonal"], "each member its own kind's tails"
    assert joint._fleet is champion.tails[PcaDetector.kind][JOINT_TAIL]
    borrow_tails([(level, None), (seasonal, None)], None)
    assert level._fleet == {}, "without a champion, no older one's tails are kept"
    assert seasonal._fleet == {}

    broken = {**params, field_of("seasonal"): {"temperature": {"counts": [1.0, 2.0]}}}
    assert fleet_model("fleet-h/2", dumps(broken)) is None, "a malformed champion is unreadable"


def test_a_seasonal_stream_is_held_to_the_fleets_tail_of_its_deviations() -> None:
    fleet = [seasonal_fed(heavy(4000, s)) for s in range(4)]
    pooled = tails_of(pool_tails([d.to_params() for d in fleet]))["seasonal"]
    assert pooled["p"].prior == fleet[0].tails[0].prior, "the seasonal tail's prior shape kept"
    young = seasonal_fed(heavy(400, 9))
    assert young.tails[0].summary.weight >= MIN_HISTORY
    assert not young.tails[0].knows_excursions()
    # a value between the young stream's own threshold and the fleet's
    own, held = young._bar(young.tails[0], 1), young._bar(pooled["p"], 1)
    assert held > own, "four devices' days of Student-t deviations reach further than 400"
    frame = reading_between(young, 400, own, held)
    assert young.score(frame).alert.all()
    young.borrow_tails(pooled)
    assert not young.score(frame).alert.any()
    young.borrow_tails({"other": pooled["p"]})
    assert young.score(frame).alert.all(), "another metric's tail is not this one's"

    # unlike the level member, a seasonal stream stays held once it knows its excursions
    grown = seasonal_fed(np.random.default_rng(9).normal(10.0, 1.0, 4000))
    assert grown.tails[0].knows_excursions()
    alone = grown._bar(grown.tails[0], 1)
    grown.borrow_tails(pooled)
    assert grown._held_to_fleet("p", alone, 1) == max(alone, grown._bar(pooled["p"], 1)) > alone


def test_a_fleet_started_together_holds_its_young_seasonal_streams_to_their_pooled_bodies() -> None:
    """No device has ``MIN_HISTORY`` of its own yet, so each judges at ``EARLY_Z``; their
    first minutes pooled are a history, whose body's tail says how far such noise strays."""
    fleet = [seasonal_fed(heavy(150, s)) for s in range(4)]
    assert all(d.tails[0].summary.weight < MIN_HISTORY for d in fleet)
    pooled = tails_of(pool_tails([d.to_params() for d in fleet]))["seasonal"]
    assert pooled["p"].summary.weight >= MIN_HISTORY
    assert not pooled["p"].knows_excursions()
    young = fleet[0]
    held = young._bar(pooled["p"], 1)
    assert held > EARLY_Z, "Student-t (2 dof) deviations stray past the early threshold"
    frame = reading_between(young, 150, EARLY_Z, held)
    assert young.score(frame).alert.all()
    young.borrow_tails(pooled)
    assert not young.score(frame).alert.any()


def test_a_second_regime_is_held_to_the_fleets_tail_too() -> None:
    """A machine first seen stopped, then running: its running speed is the metric's second
    regime, whose young tail is judged at the early threshold; the fleet's devices, pooled,
    know how far the running noise strays. Once the regime's own tail is grown, it judges."""
    fleet = [seasonal_fed(heavy(4000, s)) for s in range(4)]
    pooled = tails_of(pool_tails([d.to_params() for d in fleet]))["seasonal"]
    machine = seasonal_fed(np.random.default_rng(7).normal(0.0, 0.1, 400))
    running = 100.0 + np.random.default_rng(5).standard_t(2, 120)
    frame = pd.DataFrame(
        {"event_ms": (400 + np.arange(running.size)) * STEP_MS, "metric": "p", "value": running}
    )
    machine.learn(frame, exclude=np.zeros(running.size, bool))  # a lasting move adopted
    assert machine.alt.metrics == ["p"]
    far = pd.DataFrame({"event_ms": [520 * STEP_MS], "metric": "p", "value": [300.0]})
    assert machine.score(far).alert.all(), "judged against the running regime's early threshold"
    machine.borrow_tails(pooled)
    assert not machine.score(far).alert.any()

    # grown, the running regime is judged by its own tail: the fleet's would hide this value
    machine.borrow_tails({})
    more = 100.0 + np.random.default_rng(6).standard_t(2, 600)
    for lo in range(0, more.size, 50):
        part = more[lo : lo + 50]
        times = (520 + lo + np.arange(part.size)) * STEP_MS
        chunk = pd.DataFrame({"event_ms": times, "metric": "p", "value": part})
        machine.learn(chunk, exclude=machine.score(chunk).alert)
    assert machine.alt_tails[0].summary.weight >= MIN_HISTORY
    far = pd.DataFrame({"event_ms": [1200 * STEP_MS], "metric": "p", "value": [300.0]})
    assert machine.score(far).alert.all()
    machine.borrow_tails(pooled)
    assert machine._bar(pooled["p"], 1) > machine._bar(machine.alt_tails[0], 1)
    assert machine.score(far).alert.all()


def joint_fed(n: int, seed: int, df: float | None) -> PcaDetector:
    """The joint member held to a budget of one-reading breaks, taught a humidity tied to its
    temperature and off the tie by Student-t noise of ``df`` degrees of freedom (``None``:
    Gaussian), a reading every 10 s, scored then learned 100 readings at a time."""
    rng = np.random.default_rng(seed)
    temp = 21.0 + 0.3 * rng.normal(size=n)
    noise = rng.normal(size=n) if df is None else rng.standard_t(df, size=n)
    wide = pd.DataFrame(
        {
            "event_ms": np.arange(n, dtype=np.int64) * 10_000,
            "temperature": temp,
            "humidity": 55.0 - 2.0 * (temp - 21.0) + 0.1 * noise,
        }
    )
    frame = wide.melt(id_vars="event_ms", var_name="metric").sort_values("event_ms")
    detector = PcaDetector(shock_alerts_per_day=1.0)
    for lo in range(0, n, 100):
        part = frame[frame.event_ms.between(lo * 10_000, (lo + 99) * 10_000)]
        detector.learn(part, exclude=detector.score(part).alert)
    return detector


def humidity_break(detector: PcaDetector, deviate: float, at: int) -> pd.DataFrame:
    """A reading at ``at`` on the tie but for its humidity, off it by the residual deviate
    ``deviate`` (Wilson-Hilferty) under ``detector``'s model."""
    model = detector.model()
    assert model is not None
    h = model.residual_var.size
    i = detector.metrics.index("humidity")
    per_unit = float(((model.residual_axes[i] / model.std[i]) ** 2 / model.residual_var).sum())
    energy = h * (1.0 - 2.0 / (9.0 * h) + deviate * np.sqrt(2.0 / (9.0 * h))) ** 3
    values = dict(zip(detector.metrics, model.mean, strict=True))
    values["humidity"] += float(np.sqrt(energy / per_unit))
    return pd.DataFrame(
        {"event_ms": [at * 10_000] * 2, "metric": list(values), "value": list(values.values())}
    )


def test_a_joint_members_one_reading_breaks_are_held_to_the_fleets_pooled_tail() -> None:
    """A young device's tie has seen too few of its breaks to know how far its noise breaks
    it; the fleet's devices of its kind, pooled, know. A break of one reading alone beyond the
    χ² model's doubt, short of where the fleet's breaks pass at the budget's rate, is noise
    the fleet makes; past that level it alerts."""
    fleet = [joint_fed(6000, s, df=2) for s in range(4)]
    pooled = tails_of(pool_tails([d.to_params() for d in fleet]))[PcaDetector.kind]
    assert list(pooled) == [JOINT_TAIL]
    assert pooled[JOINT_TAIL].knows_excursions()
    young = joint_fed(400, 9, df=None)
    assert not young.tail.knows_excursions()
    assert young._judged_by()[0] is young.tail
    young.borrow_tails(pooled)
    tail, bar = young._judged_by()
    assert tail is pooled[JOINT_TAIL]
    beyond_doubt = 8.8  # past p = 1e-18 as a normal deviate: the χ² model alone alerts
    assert bar > beyond_doubt + 0.5
    inside = humidity_break(young, 0.5 * (beyond_doubt + bar), 400)
    past = humidity_break(young, bar + 1.0, 400)
    assert not young.score(inside).alert.any()
    assert young.score(past).alert.any()
    young.borrow_tails({})
    assert young._judged_by()[0] is young.tail, "without a fleet model, its own"
    assert young.score(inside).alert.any()


def test_a_devices_body_bar_holds_with_the_pools_tail_until_its_own_knows_its_breaks() -> None:
    """A device past its first minutes whose own tail has not yet seen its breaks sets a bar
    from its body alone; where that bar is above the pool's, it holds, judged on the pool's
    tail (not on the χ² model alone, which its heavier noise passes)."""
    fleet = [joint_fed(6000, s, df=None) for s in range(4)]
    pooled = tails_of(pool_tails([d.to_params() for d in fleet]))[PcaDetector.kind][JOINT_TAIL]
    assert pooled.knows_excursions()
    device = joint_fed(400, 9, df=2)
    assert not device.tail.knows_excursions()
    own = device._own_bar(device.tail)
    assert own > device._own_bar(pooled)
    device.borrow_tails({JOINT_TAIL: pooled})
    assert device._judged_by() == (pooled, own)
    beyond_doubt = 8.8  # past p = 1e-18 as a normal deviate: the χ² model alone alerts
    assert own > beyond_doubt + 0.5
    assert not device.score(humidity_break(device, 0.5 * (beyond_doubt + own), 400)).alert.any()
    assert device.score(humidity_break(device, own + 1.0, 400)).alert.any()
