"""The change detector's local line (models/trend.py): exact, incremental, and what it follows."""

from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.models import trend


def naive(values: np.ndarray, halflife: float) -> np.ndarray:
    """Weighted least squares through the earlier readings, solved afresh for each reading."""
    out = np.full(values.size, np.nan)
    for i in range(2, values.size):
        j = np.arange(i, dtype=float)
        w = 2.0 ** (-(i - j) / halflife)
        design = np.column_stack([np.ones(i), j - i]) * np.sqrt(w)[:, None]
        coef, *_ = np.linalg.lstsq(design, values[:i] * np.sqrt(w), rcond=None)
        out[i] = coef[0]
    return out


@pytest.mark.parametrize("halflife", [3.0, 30.0])
def test_prefix_sums_equal_a_fresh_weighted_fit_per_reading(halflife: float) -> None:
    values = np.random.default_rng(0).normal(5.0, 1.0, 300)
    predicted, _, _ = trend.predict(values, trend.empty(), halflife)
    assert np.isnan(predicted[:2]).all()
    np.testing.assert_allclose(predicted[2:], naive(values, halflife)[2:], rtol=1e-7, atol=1e-7)


def test_batches_carried_from_one_to_the_next_equal_one_batch() -> None:
    values = np.random.default_rng(1).normal(0.0, 1.0, 5000).cumsum()
    whole, whole_vol, end = trend.predict(values, trend.empty(), 30.0)
    parts, vols, carry = [], [], trend.empty()
    for chunk in np.array_split(values, [1, 7, 500, 4000]):
        got, vol, carry = trend.predict(chunk, carry, 30.0)
        parts.append(got)
        vols.append(vol)
    np.testing.assert_allclose(np.concatenate(parts), whole, rtol=1e-9, atol=1e-8, equal_nan=True)
    np.testing.assert_allclose(np.concatenate(vols), whole_vol, rtol=1e-9, equal_nan=True)
    np.testing.assert_allclose(carry, end, rtol=1e-9)


@pytest.mark.parametrize("halflife", [3.0, 30.0])
def test_a_few_readings_stepped_one_by_one_equal_the_prefix_sums(
    halflife: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Live batches (a few readings per metric) take the one-by-one path: same predictions,
    volatility and carry as the vectorised one, from an empty carry and from a warm one."""
    rng = np.random.default_rng(2)
    sizes = [1, 1, 2, 3, 16, 5, 1, 9]
    chunks = [rng.normal(3.0, 1.0, n) + np.linspace(0.0, 0.5, n) for n in sizes]
    stepped, carry = [], trend.empty()
    for chunk in chunks:
        assert chunk.size <= trend.SMALL
        stepped.append(trend.predict(chunk, carry, halflife))
        carry = stepped[-1][2]
    monkeypatch.setattr(trend, "SMALL", 0)
    carry = trend.empty()
    for chunk, (pred, vol, after) in zip(chunks, stepped, strict=True):
        want_pred, want_vol, carry = trend.predict(chunk, carry, halflife)
        np.testing.assert_allclose(pred, want_pred, rtol=1e-10, atol=1e-10, equal_nan=True)
        np.testing.assert_allclose(vol, want_vol, rtol=1e-10, atol=1e-10, equal_nan=True)
        np.testing.assert_allclose(after, carry, rtol=1e-10, atol=1e-10)
        carry = after


def test_a_long_batch_is_cut_where_the_weights_would_overflow() -> None:
    values = np.linspace(0.0, 1.0, 20_000)
    predicted, _, carry = trend.predict(values, trend.empty(), 5.0)
    assert np.isfinite(carry).all()
    np.testing.assert_allclose(predicted[2:], values[2:], atol=1e-9)  # a line is predicted exactly


def test_a_step_is_absorbed_and_a_slow_cycle_followed() -> None:
    i = np.arange(3000, dtype=float)
    step = np.where(i < 1500, 0.0, 10.0)
    predicted, _, _ = trend.predict(step, trend.empty(), 30.0)
    assert predicted[1500] == pytest.approx(0.0, abs=1e-9)  # the step itself is a surprise
    assert abs(predicted[1500 + 300] - 10.0) < 0.1  # ten half-lives later it is the level
    cycle = 600.0 * np.sin(2 * np.pi * i / 600.0)  # a 10-minute cycle at one reading a second
    predicted, _, _ = trend.predict(cycle, trend.empty(), 30.0)
    assert np.abs(predicted[300:] - cycle[300:]).max() < 0.2 * 600.0  # curvature: ~17 %


def test_the_volatility_is_the_weighted_rms_of_earlier_residuals_and_follows_the_noise() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(0.0, 0.03, 600), rng.normal(4.0, 0.3, 600)])
    predicted, vol, _ = trend.predict(values, trend.empty(), 30.0)
    i = 700
    r2 = (values[:i] - predicted[:i]) ** 2
    w = 2.0 ** (-(i - np.arange(i)) / 30.0)
    known = np.isfinite(r2)
    assert vol[i] == pytest.approx(np.sqrt((w * r2)[known].sum() / w[known].sum()), rel=1e-9)
    assert vol[590] < 0.05  # quiet while off
    assert 0.25 < vol[1190] < 0.45  # the running noise within a few half-lives
