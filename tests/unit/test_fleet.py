"""Pooling device PCA moments into a fleet model equals fitting the concatenated data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleetwatch.fleet.pca import MAX_STATES, RANGE_Z, device_states, fleet_range, pool_pca
from fleetwatch.models.batch import Batch
from fleetwatch.models.errors import FleetModelError, ParamsError
from fleetwatch.models.multivariate import PcaDetector
from tests.unit import signals
from tests.unit.mlflow_store import device_readings

OFFSETS = (-4.0, 0.5, 6.0)
LENGTHS = (signals.DAY, 2 * signals.DAY, 3 * signals.DAY + 17)


def _devices(halflife_hours: float | None) -> dict[str, pd.DataFrame]:
    """Devices with different levels and lengths; device i's event times are moved by i ms so
    that the concatenation keeps every device's rows apart."""
    out = {}
    for i, (offset, n) in enumerate(zip(OFFSETS, LENGTHS, strict=True)):
        frame = device_readings(seed=20 + i, offset=offset, n=n)
        frame["event_ms"] += i
        out[f"dev-{i}"] = frame
    return out


def _pooled(
    frames: dict[str, pd.DataFrame], halflife_hours: float | None, max_axis_var: float | None = 0.25
) -> PcaDetector:
    params = {
        device: PcaDetector(components=1, halflife_hours=halflife_hours, max_axis_var=max_axis_var)
        .learn(f)
        .to_params()
        for device, f in frames.items()
    }
    return PcaDetector.from_params(pool_pca(params))


def test_the_pooled_pca_is_the_pca_of_the_concatenated_readings() -> None:
    """Each device's rows weighed at most as the median device's, and the most outlying
    device's readings (of three, one), per metric, moved toward the devices' median mean until
    their second moment about it is the next one's."""
    frames = _devices(halflife_hours=None)
    fleet = _pooled(frames, halflife_hours=None)
    model = fleet.model()
    assert model is not None
    wides = [
        f.pivot(index="event_ms", columns="metric", values="value")[fleet.metrics].to_numpy()
        for f in frames.values()
    ]
    centre = np.median([w.mean(axis=0) for w in wides], axis=0)
    second = np.array([((w - centre) ** 2).mean(axis=0) for w in wides])
    shrink = np.sqrt(np.minimum(1.0, np.sort(second, axis=0)[-2] / second))
    assert (shrink[2] < 1.0).all(), "the device furthest off is shrunk"
    rows = np.concatenate([centre + k * (w - centre) for k, w in zip(shrink, wides, strict=True)])
    capped = [np.full(len(w), min(1.0, np.median(LENGTHS) / len(w))) for w in wides]
    weights = np.concatenate(capped)
    mean = np.average(rows, axis=0, weights=weights)
    std = np.sqrt(np.average((rows - mean) ** 2, axis=0, weights=weights))
    np.testing.assert_allclose(model.mean, mean, rtol=1e-9)
    np.testing.assert_allclose(model.std, std, rtol=1e-9)
    z = (rows - mean) / std
    _, axes = np.linalg.eigh((z * weights[:, None]).T @ z / weights.sum())
    np.testing.assert_allclose(np.abs(axes[:, -1] @ model.axes), [1.0], atol=1e-9)
    # the levels differ between devices, so the fleet spread is more than any device's own
    own = [PcaDetector(halflife_hours=None).learn(f).model() for f in frames.values()]
    assert all(m is not None and (model.std > m.std).all() for m in own)
    assert fleet.count == sum(LENGTHS)


def test_decayed_moments_pool_to_those_of_one_detector_that_learned_every_device() -> None:
    """Two devices of one length: neither outlying (of two, neither is) nor heavier."""
    frames = {}
    for i, offset in enumerate((-4.0, 6.0)):
        frames[f"dev-{i}"] = device_readings(seed=20 + i, offset=offset, n=2 * signals.DAY)
        frames[f"dev-{i}"]["event_ms"] += i  # the concatenation keeps both devices' rows
    fleet = _pooled(frames, halflife_hours=24.0)
    together = PcaDetector(components=1, halflife_hours=24.0).learn(
        pd.concat(frames.values(), ignore_index=True)
    )
    fm, tm = fleet.model(), together.model()
    assert fm is not None
    assert tm is not None
    # up to the 1 ms of decay between the devices' weights, the heavier's capped to the median
    assert fleet.weight == pytest.approx(together.weight, rel=1e-8)
    np.testing.assert_allclose(fm.mean, tm.mean, rtol=1e-8)
    np.testing.assert_allclose(fm.std, tm.std, rtol=1e-8)
    np.testing.assert_allclose(np.abs(fm.axes.T @ tm.axes), [[1.0]], atol=1e-10)
    probe = signals.after_training("decoupled")
    np.testing.assert_allclose(fleet.score(probe).score, together.score(probe).score, atol=1e-8)
    assert fleet.trained_from_ms == 0
    assert fleet.trained_to_ms == max(int(f.event_ms.max()) for f in frames.values())


def test_devices_that_learned_nothing_are_left_out() -> None:
    frames = _devices(halflife_hours=None)
    params = {d: PcaDetector(halflife_hours=None).learn(f).to_params() for d, f in frames.items()}
    params["new"] = PcaDetector(halflife_hours=None).to_params()
    assert pool_pca(params)["state"]["count"] == sum(LENGTHS)


def test_nothing_fitted_is_refused() -> None:
    with pytest.raises(FleetModelError, match="none of 1 device"):
        pool_pca({"new": PcaDetector().to_params()})


def test_devices_with_other_metrics_or_settings_are_refused_by_name() -> None:
    base = PcaDetector(halflife_hours=None).learn(device_readings(1, 0.0)).to_params()
    other = signals.wide(300, seed=2).rename(columns={"humidity": "pressure"})
    odd = PcaDetector(halflife_hours=None).learn(signals.long(other)).to_params()
    with pytest.raises(FleetModelError, match="'odd' has metrics"):
        pool_pca({"a": base, "odd": odd})
    slow = PcaDetector(halflife_hours=48.0).learn(device_readings(3, 0.0)).to_params()
    with pytest.raises(FleetModelError, match="'slow' has hyperparameters"):
        pool_pca({"a": base, "slow": slow})


def test_the_fleet_knows_what_some_device_holds_normal_and_no_further() -> None:
    frames = _devices(halflife_hours=None)
    # every residual axis judged: the devices' levels differ off their metrics' tie, which
    # loosens the pooled tie (residual eigenvalue 0.52, each device's 0.05-0.06)
    fleet = _pooled(frames, halflife_hours=None, max_axis_var=None)
    assert fleet.bounds is not None
    wide = {
        d: f.pivot(index="event_ms", columns="metric", values="value")[fleet.metrics]
        for d, f in frames.items()
    }
    # of three devices, the one with the lowest low end and the one with the highest high end
    # are left out: the middle ones bound the range
    lo = np.median([w.mean() - RANGE_Z * w.std(ddof=0) for w in wide.values()], axis=0)
    hi = np.median([w.mean() + RANGE_Z * w.std(ddof=0) for w in wide.values()], axis=0)
    np.testing.assert_allclose(fleet.bounds, np.stack([lo, hi]), rtol=1e-9)
    # and the bounds survive the parameters' round trip
    again = PcaDetector.from_params(fleet.to_params())
    assert again.bounds is not None
    np.testing.assert_allclose(again.bounds, fleet.bounds)
    assert PcaDetector.from_params(PcaDetector().to_params()).bounds is None

    level = {d: w.mean() for d, w in wide.items()}
    usual = level["dev-1"]  # a reading some device has as its usual one
    far = usual + 10 * (fleet.bounds[1] - fleet.bounds[0])  # beyond every device's range
    probe = pd.DataFrame(
        [(1000, m, usual[m]) for m in fleet.metrics] + [(2000, m, far[m]) for m in fleet.metrics],
        columns=["event_ms", "metric", "value"],
    )
    assert fleet.familiar_times(Batch.of(probe)) == {1000}
    # within every metric's range, but against how the fleet's metrics move together
    inside = dict(zip(fleet.metrics, fleet.bounds.mean(axis=0), strict=True))
    half = dict(zip(fleet.metrics, (fleet.bounds[1] - fleet.bounds[0]) * 0.45, strict=True))
    odd = {"humidity": inside["humidity"] + half["humidity"]}
    odd["temperature"] = inside["temperature"] - half["temperature"]
    against = pd.DataFrame(
        [(3000, m, odd[m]) for m in fleet.metrics], columns=["event_ms", "metric", "value"]
    )
    assert fleet.familiar_times(Batch.of(against)) == set()
    # a device's own model knows no fleet: nothing is familiar to it
    own = PcaDetector(halflife_hours=None).learn(frames["dev-0"])
    assert own.familiar_times(Batch.of(probe)) == set()


def test_one_device_cannot_widen_the_fleets_range_and_a_share_of_them_can() -> None:
    rng = np.random.default_rng(5)
    means = rng.normal(20.0, 1.0, size=(40, 1))
    lows, highs = means - 2.0, means + 2.0
    usual = fleet_range(lows, highs)
    wide_one = highs.copy()
    wide_one[7] += 50.0  # one device's spread grew with a fault it learned
    # at most the highest end of the other devices
    assert usual[1, 0] <= fleet_range(lows, wide_one)[1, 0] <= np.delete(highs, 7).max()
    wide_some = highs.copy()
    wide_some[:5] += 50.0  # more than the left-out share hold it normal
    assert fleet_range(lows, wide_some)[1, 0] > usual[1, 0] + 40.0
    # two devices are both kept: neither is the odd one out
    pair = fleet_range(np.array([[0.0], [5.0]]), np.array([[1.0], [9.0]]))
    np.testing.assert_array_equal(pair, [[0.0], [9.0]])


def _battery(seed: int, charge: float, n: int = 600) -> pd.DataFrame:
    """A battery at ``charge`` % whose voltage follows it, with a walk of its own."""
    rng = np.random.default_rng(seed)
    soc = charge + 0.2 * rng.standard_normal(n)
    walk = 0.07 * rng.standard_normal() + np.cumsum(rng.normal(0.0, 0.0005, n))
    volts = 3.3 + 0.009 * soc + 0.005 * rng.standard_normal(n) + walk
    frame = pd.DataFrame({"event_ms": np.arange(n) * 1000, "battery_v": volts, "soc_pct": soc})
    return signals.long(frame)


def test_the_fleet_knows_a_state_some_device_holds_not_one_its_pooled_tie_allows() -> None:
    charges = np.linspace(15.0, 100.0, 18)
    params = {
        f"bat-{i}": PcaDetector(halflife_hours=None).learn(_battery(40 + i, c)).to_params()
        for i, c in enumerate(charges)
    }
    fleet = PcaDetector.from_params(pool_pca(params))
    assert fleet.states is not None
    assert fleet.states.shape == (2, 18, 2)

    def reading(at: int, volts: float, soc: float) -> pd.DataFrame:
        return pd.DataFrame(
            [(at, "battery_v", volts), (at, "soc_pct", soc)],
            columns=["event_ms", "metric", "value"],
        )

    held = _battery(47, charges[7]).groupby("metric")["value"].mean()
    usual = reading(1000, held["battery_v"], held["soc_pct"])  # where one battery is
    # a correlated fault: the voltage up 0.25 V as the charge fell 10 % — no battery is at
    # 60 % with 4.18 V, yet both values lie in the fleet's ranges and the loose pooled tie
    # (each battery's walk) puts the reading under the alert level
    broken = reading(2000, 3.3 + 0.009 * 70.0 + 0.25, 60.0)
    probe = Batch.of(pd.concat([usual, broken]))
    tie_only = PcaDetector.from_params({**fleet.to_params(), "state": _without_states(fleet)})
    assert tie_only.states is None
    assert tie_only.familiar_times(probe) == {1000, 2000}
    assert fleet.familiar_times(probe) == {1000}
    # the states survive the parameters' round trip
    again = PcaDetector.from_params(fleet.to_params())
    assert again.states is not None
    np.testing.assert_array_equal(again.states, fleet.states)
    assert again.familiar_times(probe) == {1000}
    for bad in ([], [[1.0, 2.0]], "states"):
        with pytest.raises(ParamsError, match="'states'"):
            PcaDetector.from_params(
                {**fleet.to_params(), "state": {**_without_states(fleet), "states": bad}}
            )


def _without_states(fleet: PcaDetector) -> dict[str, object]:
    """A fleet model's state as pooled before the devices' states were kept."""
    state = dict(fleet.to_params()["state"])
    state.pop("states")
    return state


def test_a_device_whose_state_lies_within_a_heavier_ones_adds_nothing() -> None:
    lows = np.array([[0.0, 0.0], [1.0, 1.0], [1.0, -1.0], [5.0, 5.0]])
    highs = np.array([[4.0, 4.0], [3.0, 3.0], [3.0, 3.0], [6.0, 6.0]])
    weights = np.array([10.0, 5.0, 5.0, 1.0])
    states = device_states(lows, highs, weights)
    # device 1 lies within device 0; device 2 reaches lower on the second metric
    np.testing.assert_array_equal(states[0], lows[[0, 2, 3]])
    np.testing.assert_array_equal(states[1], highs[[0, 2, 3]])
    # a light device inside a heavy one, whichever comes first
    np.testing.assert_array_equal(
        device_states(lows[[1, 0]], highs[[1, 0]], weights[[1, 0]])[0], lows[[0]]
    )
    many = np.arange(2 * MAX_STATES, dtype=float)[:, None]
    kept = device_states(many, many + 0.5, many[:, 0])
    assert kept.shape == (2, MAX_STATES, 1)
    assert kept[0, :, 0].min() == MAX_STATES  # the heaviest
