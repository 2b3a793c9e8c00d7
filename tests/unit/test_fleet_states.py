"""The states a fleet's devices hold, lent to a device that has not seen them itself: a
switch of a newcomer into a state its fleet knows is no alert of its seasonal or level member."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from fleetwatch.fleet import publish
from fleetwatch.fleet.publish import pooled_by_scope
from fleetwatch.fleet.tails import Members, field_of, pool_members, pool_tails, tails_of
from fleetwatch.models.level import _skipping, moving_average
from fleetwatch.models.seasonal import SeasonalBaseline
from fleetwatch.models.states import SEPARATION, PooledTail, nearest_state, states_of
from fleetwatch.models.tail import StreamTail
from tests.unit.test_fleet_tails import STEP_MS, fed, learned, seasonal_fed

STOPPED, RUNNING, NOISE = 5.0, 12.0, 0.2


def frame(at: int, values: np.ndarray) -> pd.DataFrame:
    """``values``, a reading a second from the ``at``-th."""
    times = (at + np.arange(values.size)) * STEP_MS
    return pd.DataFrame({"event_ms": times, "metric": "p", "value": values})


def noise(level: float, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(level, NOISE, n)


def two_state(seed: int) -> SeasonalBaseline:
    """A device seen stopped, then running long enough for the move to be adopted: its running
    speed is its second regime."""
    device = seasonal_fed(noise(STOPPED, 400, seed))
    running = noise(RUNNING, 120, seed + 100)
    device.learn(frame(400, running), exclude=np.zeros(running.size, bool))
    assert device.alt.metrics == ["p"]
    return device


def pooled_of(*devices: object) -> dict[str, dict[str, StreamTail]]:
    return tails_of(pool_tails([d.to_params() for d in devices]))  # type: ignore[attr-defined]


def test_a_device_of_two_regimes_lends_both_and_one_of_a_single_state_none() -> None:
    device = two_state(1)
    held = device.held_states()["p"]
    assert np.allclose(held[:, 0], [STOPPED, RUNNING], atol=0.1)
    assert np.allclose(held[:, 1], NOISE, rtol=0.3)
    steady = seasonal_fed(noise(STOPPED, 400, 2))
    assert steady.held_states() == {}

    pooled = pool_tails([two_state(3).to_params(), steady.to_params()])
    states = pooled[field_of("seasonal")]["p"]["states"]
    assert sorted(round(mean) for mean, _ in states) == [5, 12]
    tail = tails_of(pool_tails([two_state(3).to_params(), steady.to_params()]))["seasonal"]["p"]
    assert isinstance(tail, PooledTail)
    assert np.allclose(states_of({"p": tail}, "p"), states)
    again = PooledTail.load(tail.summary.halflife, tail.state(), tail.prior)
    assert np.array_equal(again.states, tail.states), "the states round-trip with the tail"

    alone = pool_tails([steady.to_params(), seasonal_fed(noise(RUNNING, 400, 4)).to_params()])
    assert alone[field_of("seasonal")]["p"]["states"] == [], "single-state devices lend none"


def test_the_nearest_state_apart_from_the_devices_own() -> None:
    states = np.array([[STOPPED, NOISE], [RUNNING, 1.0]])
    value = np.array([5.1, 12.0, 8.5, 12.1])
    mean = np.array([12.0, 5.0, 12.0, 11.0])
    std = np.array([0.2, 0.2, 0.2, 0.4])
    state, spread, z = nearest_state(value, mean, std, np.zeros(4), states)
    assert (state[0], spread[0], round(z[0], 9)) == (STOPPED, NOISE, 0.5)
    assert (state[1], spread[1]) == (RUNNING, 1.0), "judged in the wider of the two spreads"
    assert np.isclose(z[2], (8.5 - STOPPED) / NOISE)
    # the running state is within SEPARATION spreads of the device's own: not lent
    assert state[3] == STOPPED
    assert np.isclose(z[3], (12.1 - STOPPED) / 0.4)
    far = nearest_state(value[:1], mean[:1], std[:1], np.zeros(1), np.array([[11.5, NOISE]]))[2]
    assert np.isinf(far).all(), f"no state {SEPARATION} spreads from the device's own"


def test_a_newcomer_switching_into_a_state_its_fleet_holds_is_no_seasonal_alert() -> None:
    fleet = pooled_of(two_state(1), two_state(2), two_state(3))["seasonal"]
    newcomer = seasonal_fed(noise(RUNNING, 400, 9))
    stopped = frame(400, noise(STOPPED, 20, 10))
    between = frame(400, np.full(20, 0.5 * (STOPPED + RUNNING)))
    assert newcomer.score(stopped).alert.all(), "alone, it has never seen the machine stopped"
    newcomer.borrow_tails(fleet)
    assert not newcomer.score(stopped).alert.any()
    assert newcomer.score(between).alert.all(), "a level no device holds still alerts"

    # the state the fleet lent, kept, is the device's own second regime from then on
    newcomer.learn(stopped, exclude=newcomer.score(stopped).alert)
    assert newcomer.alt.metrics == ["p"]
    newcomer.borrow_tails({})
    assert not newcomer.score(frame(420, noise(STOPPED, 20, 11))).alert.any()

    one_state = pooled_of(
        seasonal_fed(noise(STOPPED, 400, 1)), seasonal_fed(noise(RUNNING, 400, 2))
    )["seasonal"]
    alone = seasonal_fed(noise(RUNNING, 400, 9))
    alone.borrow_tails(one_state)
    assert alone.score(stopped).alert.all(), "another device's only level is no state it knows"


def test_a_newcomer_switching_into_a_state_its_fleet_holds_is_no_level_shift() -> None:
    veterans = [two_state(1), two_state(2), fed(noise(RUNNING, 2000, 3)), fed(noise(5.0, 2000, 4))]
    fleet = pooled_of(*veterans)["level"]
    assert states_of(fleet, "p").shape == (4, 2), "the level member is lent the states too"
    newcomer = fed(noise(RUNNING, 600, 9))
    stopped = frame(600, noise(STOPPED, 60, 10))
    assert newcomer.score(stopped).alert.any(), "alone, a switch is a shift of its level"
    newcomer.borrow_tails(fleet)
    assert not newcomer.score(stopped).alert.any()
    shifted = frame(600, noise(0.5 * (STOPPED + RUNNING), 60, 11))
    assert newcomer.score(shifted).alert.any(), "a level no device holds is still a shift"

    # a reading in a state the fleet knows is not learned as the profile's level
    before = newcomer.profile.moments(newcomer.min_std)[0][0, -1]
    newcomer.learn(stopped, exclude=np.zeros(60, bool))
    assert np.isclose(newcomer.profile.moments(newcomer.min_std)[0][0, -1], before)


def test_a_scope_of_one_metric_lends_its_states_one_with_a_joint_model_tells_them_by_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = {f"d{s}": {"device_id": f"d{s}", "params": two_state(s).to_params()} for s in range(3)}
    ((params, devices),) = pooled_by_scope(table).values()
    assert devices == 3
    assert params["pca"] is None
    assert len(params[field_of("seasonal")]["p"]["states"]) == 6

    asked: list[bool] = []

    def spy(devices: list[Members], states: bool = True) -> dict[str, Any]:
        asked.append(states)
        return pool_members(devices, states)

    monkeypatch.setattr(publish, "pool_members", spy)
    joint = {f"d{s}": learned({"temperature": 21.0, "humidity": 40.0}, s) for s in range(3)}
    ((params, _),) = pooled_by_scope(joint).values()
    assert params["pca"] is not None
    assert asked == [False], "its PCA part's familiar_times tell the states its devices hold"
    assert all(t["states"] == [] for t in params[field_of("seasonal")].values())


def test_the_level_average_holds_over_readings_in_another_state() -> None:
    r = np.array([1.0, 2.0, 50.0, 50.0, 3.0])
    skip = np.array([False, False, True, True, False])
    uncut = np.full(5, np.inf)
    e, _ = _skipping(r, skip, 0.1, (0.5, 0), uncut)
    taken = moving_average(r[~skip], 0.1, 0.5)
    assert np.allclose(e, [taken[0], taken[1], taken[1], taken[1], taken[2]])
    assert np.allclose(_skipping(r, np.ones(5, bool), 0.1, (0.5, 0), uncut)[0], 0.5)
    plain = moving_average(r, 0.1, 0.5)
    assert np.allclose(_skipping(r, np.zeros(5, bool), 0.1, (0.5, 0), uncut)[0], plain)
