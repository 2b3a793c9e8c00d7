"""One device cannot skew its scope's fleet model: not by reading a hundred times as often as its
peers, nor by being ten times as noisy (issue 69, item 5).

The scope: twenty peers and one device with 100x their readings and 10x their noise. Its
pooled thresholds — the PCA member's band (``ALERT_Z`` of the pooled standard deviations) and
the level member's pooled tail's threshold — are compared with those of the twenty peers alone.
Weighed by readings (before this test), the one device set them: 9.2x the band, 9.4x the tail's
threshold; pooled robustly it counts as one typical peer of twenty-one: +0.3% and +0.8%.

Why the bounds: the noisy device is shrunk to (moments) or left out with (tails) the widest of
the others, and weighs at most the median device, so what it can move is one typical peer's
share of the pool. Twenty-one devices shrink or leave out one, as twenty do, so the two pools
differ by one peer's data in twenty: ``1/20`` of a peer's deviation from the rest. For the
moments, a peer's variance from 600 readings strays up to some 15% from the rest
(``2.2 · sqrt(2/600)``, the widest of twenty), so the pooled variance moves by under
``15% / 20``, its standard deviation by half that, 0.4%: 2% is that with room. For the tails,
a peer's own threshold from 3,000 readings strays from -10% to +25% of the median (standard
deviation 10%): ``25% / 20``, 1.3%; 5% leaves room for a tail fit's jumps between bins
(``BIN_WIDTH``, an eighth of a deviation, is 2.5% of a threshold near 5).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy.signal import lfilter

from fleetwatch.fleet.pca import pool_pca
from fleetwatch.fleet.tails import pool_tails, tails_of
from fleetwatch.models.level import LevelShiftDetector
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.tail import StreamTail

PEERS = 20
READINGS = 600
"""A peer's readings (PCA); the fast device has ``FAST`` times as many."""
FAST = 100
NOISY = 10.0
"""The fast device's noise, in the peers' units."""
STEP_MS = 1000
PCA_BOUND = 0.02
TAIL_BOUND = 0.05


def _readings(seed: int, n: int, noise: float, step_ms: int) -> pd.DataFrame:
    """Two metrics tied by a shared factor, their deviations ``noise`` times a peer's."""
    rng = np.random.default_rng(seed)
    factor = rng.normal(0.0, 1.0, n)
    temperature = 0.8 * factor + rng.normal(0.0, 0.3, n)
    humidity = -2.0 * factor + rng.normal(0.0, 0.5, n)
    wide = pd.DataFrame(
        {
            "event_ms": np.arange(n, dtype=np.int64) * step_ms,
            "temperature": 21.0 + noise * temperature,
            "humidity": 50.0 + noise * humidity,
        }
    )
    long = wide.melt(id_vars=["event_ms"], var_name="metric", value_name="value")
    return long.sort_values("event_ms", kind="stable").reset_index(drop=True)


def _pca(seed: int, n: int, noise: float, step_ms: int) -> dict[str, Any]:
    return PcaDetector(halflife_hours=None).learn(_readings(seed, n, noise, step_ms)).to_params()


def _band(params: dict[str, dict[str, Any]]) -> np.ndarray:
    """The pooled model's standard deviation per metric: its alert band is ``ALERT_Z`` of it."""
    model = PcaDetector.from_params(pool_pca(params)).model()
    assert model is not None
    return model.std


def test_one_fast_noisy_device_moves_the_pooled_pca_band_by_under_two_percent() -> None:
    # the same span of time: the fast device reads FAST times as often
    peers = {f"peer-{i}": _pca(i, READINGS, 1.0, STEP_MS) for i in range(PEERS)}
    fast = _pca(99, FAST * READINGS, NOISY, STEP_MS // FAST)
    alone, skewed = _band(peers), _band(peers | {"fast": fast})
    assert np.all(np.abs(skewed / alone - 1.0) <= PCA_BOUND), (skewed, alone)
    # and the level the band sits about stays the peers' (within a tenth of their deviation)
    together = PcaDetector.from_params(pool_pca(peers | {"fast": fast})).model()
    peers_only = PcaDetector.from_params(pool_pca(peers)).model()
    assert together is not None
    assert peers_only is not None
    assert np.all(np.abs(together.mean - peers_only.mean) <= 0.1 * peers_only.std)


def test_a_fast_device_of_the_fleets_own_noise_counts_as_one_peer() -> None:
    """Its weight alone is capped: the peers' spread, and its tie, are what the fleet learns."""
    peers = {f"peer-{i}": _pca(i, READINGS, 1.0, STEP_MS) for i in range(PEERS)}
    fast = _pca(99, FAST * READINGS, 1.0, STEP_MS // FAST)
    pooled = pool_pca(peers | {"fast": fast})
    assert pooled["state"]["weight"] == pytest.approx((PEERS + 1) * READINGS, rel=1e-9)
    assert np.all(np.abs(_band(peers | {"fast": fast}) / _band(peers) - 1.0) <= PCA_BOUND)


def _statistic(seed: int, n: int, scale: float) -> np.ndarray:
    """A level member's ``|z|``: an exponentially weighted average of white noise (``lam``
    0.1), in units of its own spread, times ``scale``."""
    lam = 0.1
    noise = np.random.default_rng(seed).normal(0.0, 1.0, n)
    average = lfilter([lam], [1.0, lam - 1.0], noise)
    out: np.ndarray = scale * np.abs(average) / np.sqrt(lam / (2.0 - lam))
    return out


def _level_device(seed: int, n: int, scale: float, step_ms: int) -> dict[str, Any]:
    """A level detector's parameters whose tail of metric ``p`` learned ``n`` values of the
    statistic, fifty a batch as a scorer's steps do, ``step_ms`` apart."""
    detector = LevelShiftDetector()
    warm = np.random.default_rng(seed).normal(10.0, 1.0, 40)
    detector.learn(
        pd.DataFrame({"event_ms": np.arange(warm.size) * STEP_MS, "metric": "p", "value": warm})
    )
    tail = StreamTail(detector.tail_halflife)
    values = _statistic(seed, n, scale)
    times = np.arange(n, dtype=np.int64) * step_ms
    for lo in range(0, n, 50):
        tail.observe(times[lo : lo + 50])
        tail.summary.add(values[lo : lo + 50])
        tail.excursions(values[lo : lo + 50])
    detector.tails = [tail]
    return detector.to_params()


def _pooled_threshold(devices: list[dict[str, Any]]) -> float:
    """The threshold a young device of the scope is held to by the pooled level tail."""
    pooled = tails_of(pool_tails(devices))["level"]["p"]
    assert pooled.knows_excursions()
    return LevelShiftDetector().own_threshold(pooled, 1)


def test_one_fast_noisy_device_moves_the_pooled_tails_threshold_by_under_five_percent() -> None:
    n = 3000
    peers = [_level_device(i, n, 1.0, STEP_MS) for i in range(PEERS)]
    fast = _level_device(99, FAST * n, NOISY, STEP_MS // FAST)
    alone, skewed = _pooled_threshold(peers), _pooled_threshold([*peers, fast])
    assert abs(skewed / alone - 1.0) <= TAIL_BOUND, (skewed, alone)
