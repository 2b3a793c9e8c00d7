"""A young stream's spread drawn toward its fleet's: a newcomer's first hundred readings of a
wandering level are no measure of how far it strays, and its fleet's devices know better."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fleetwatch.fleet.tails import field_of, pool_tails, tails_of
from fleetwatch.models.batch import Batch
from fleetwatch.models.seasonal import EARLY_Z, SeasonalBaseline
from fleetwatch.models.states import PooledTail, drawn_to_fleet, spread_of
from tests.unit.test_fleet_tails import STEP_MS, seasonal_fed


def noise(sd: float, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(50.0, sd, n)


def reading(at: int, value: float) -> pd.DataFrame:
    return pd.DataFrame({"event_ms": [at * STEP_MS], "metric": "p", "value": [value]})


def test_the_fleet_pools_its_devices_median_spread_and_the_tail_carries_it() -> None:
    devices = [seasonal_fed(noise(sd, 400, seed)) for seed, sd in enumerate((1.0, 2.0, 3.0))]
    spreads = [d.typical_spreads()["p"] for d in devices]
    assert np.allclose(spreads, [1.0, 2.0, 3.0], rtol=0.15)
    pooled = pool_tails([d.to_params() for d in devices])
    assert math.isclose(pooled[field_of("seasonal")]["p"]["spread"], float(np.median(spreads)))
    tail = tails_of(pooled)["seasonal"]["p"]
    assert isinstance(tail, PooledTail)
    assert spread_of({"p": tail}, "p") == tail.spread
    again = PooledTail.load(tail.summary.halflife, tail.state(), tail.prior)
    assert again.spread == tail.spread, "the spread round-trips with the tail"
    older = {k: v for k, v in tail.state().items() if k != "spread"}
    assert math.isnan(PooledTail.load(tail.summary.halflife, older, tail.prior).spread)
    assert math.isnan(spread_of({"p": tail}, "other"))


def test_the_fleets_weight_is_warmup_readings_and_the_streams_own_outweighs_it() -> None:
    own = np.array([1.0, 1.0, 1.0])
    seen = np.array([0.0, 30.0, 30_000.0])
    drawn = drawn_to_fleet(own, seen, 2.0, 30.0)
    assert drawn[0] == 2.0, "a stream of no readings has its fleet's spread"
    assert math.isclose(drawn[1], math.sqrt((1.0 + 4.0) / 2.0))
    assert math.isclose(drawn[2], 1.0, rel_tol=0.002), "thousands of its own outweigh the fleet"
    assert drawn_to_fleet(own, seen, math.nan, 30.0) is own, "no fleet: its own spread"


def test_a_young_quiet_stream_is_judged_in_its_fleets_spread() -> None:
    """A newcomer whose first hundred readings stray 0.1 joins devices that stray 2: a reading
    1.5 off is 15 of its own deviations (past ``EARLY_Z``), under one of its fleet's."""
    fleet = [seasonal_fed(noise(2.0, 400, seed)) for seed in range(3)]
    pooled = tails_of(pool_tails([d.to_params() for d in fleet]))["seasonal"]
    young = seasonal_fed(noise(0.1, 100, 9))
    assert young.tails[0].summary.weight < 200, "its tail is young: judged at EARLY_Z"
    off = reading(100, 50.0 + 1.5)
    assert young.score(off).alert.all()
    young.borrow_tails(pooled)
    assert not young.score(off).alert.any()
    assert young.score(reading(100, 50.0 + 1.5 * EARLY_Z * 2.0)).alert.all(), (
        "past EARLY_Z of its fleet's spread it still alerts"
    )
    young.borrow_tails({"other": pooled["p"]})
    assert young.score(off).alert.all(), "another metric's spread is not this one's"


def test_a_stream_of_a_day_is_judged_in_its_own_spread() -> None:
    fleet = [seasonal_fed(noise(2.0, 400, seed)) for seed in range(3)]
    pooled = tails_of(pool_tails([d.to_params() for d in fleet]))["seasonal"]
    grown: SeasonalBaseline = seasonal_fed(noise(1.0, 6000, 9))
    probe = Batch.of(reading(6000, 50.0))
    before = grown._deviation(probe, judge=False).band
    grown.borrow_tails(pooled)
    after = grown._deviation(probe, judge=False).band
    assert after[0] > before[0]
    assert after[0] < 1.02 * before[0], "6,000 readings of its own outweigh 30 of its fleet's"
