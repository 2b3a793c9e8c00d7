"""A windowed rule's aggregates merged from per-slide panes equal the aggregate computed over the
window's values directly (numpy, statistics), with SQL's answers for nulls and empty windows."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from fleetwatch.streaming.rules import panes

DIRECT: dict[str, Callable[[list[float]], float | None]] = {
    "count": lambda xs: float(len(xs)),
    "sum": lambda xs: math.fsum(xs) if xs else None,
    "avg": lambda xs: statistics.fmean(xs) if xs else None,
    "mean": lambda xs: statistics.fmean(xs) if xs else None,
    "min": lambda xs: min(xs) if xs else None,
    "max": lambda xs: max(xs) if xs else None,
    "stddev": lambda xs: statistics.stdev(xs) if len(xs) > 1 else None,
    "stddev_samp": lambda xs: statistics.stdev(xs) if len(xs) > 1 else None,
    "std": lambda xs: statistics.stdev(xs) if len(xs) > 1 else None,
    "stddev_pop": lambda xs: statistics.pstdev(xs) if xs else None,
    "variance": lambda xs: statistics.variance(xs) if len(xs) > 1 else None,
    "var_samp": lambda xs: statistics.variance(xs) if len(xs) > 1 else None,
    "var_pop": lambda xs: statistics.pvariance(xs) if xs else None,
}
FUNCTIONS = sorted(DIRECT)
SLIDE = 10
"""Event time units per pane in these tests."""


def test_every_aggregate_a_rule_may_use_is_checked_here() -> None:
    assert set(DIRECT) == panes.AGGREGATES


def close(got: float | None, want: float | None, rel: float = 1e-9) -> bool:
    if want is None or got is None:
        return got is want
    return math.isclose(got, want, rel_tol=rel, abs_tol=rel * 1e-3)


def panes_of(
    times: Sequence[int], values: Sequence[float | None], aggregates: int
) -> dict[int, list[panes.Pane]]:
    """Pane start → one partial per aggregate, as a device's state holds them; here every
    aggregate is of the same expression, so they share one partial."""
    out: dict[int, panes.Pane] = {}
    for t, v in zip(times, values, strict=True):
        start = t - t % SLIDE
        panes.add(out.setdefault(start, panes.empty()), v)
    return {start: [partial] * aggregates for start, partial in out.items()}


@pytest.mark.parametrize("seed", range(5))
def test_sliding_windows_merged_from_panes_equal_the_direct_aggregate(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    times = np.sort(rng.integers(0, 400, size=n)).tolist()
    values: list[float | None] = (rng.normal(50.0, 12.0, size=n) * rng.choice([1, -1], n)).tolist()
    for i in rng.choice(n, size=40, replace=False):  # a tenth of the readings lack the metric
        values[i] = None
    by_pane = panes_of(times, values, len(FUNCTIONS))
    size = 4 * SLIDE
    compared = 0
    for end in range(SLIDE, 400 + size, SLIDE):
        inside = [
            v for t, v in zip(times, values, strict=True) if end - size <= t < end and v is not None
        ]
        got = panes.window_values(FUNCTIONS, by_pane, end - size, end)
        for function, value in zip(FUNCTIONS, got, strict=True):
            want = DIRECT[function](inside)
            assert close(value, want), (function, end, value, want)
            compared += 1
    assert compared == len(FUNCTIONS) * (400 + size - SLIDE) // SLIDE


def test_merging_panes_in_any_grouping_gives_the_same_moments() -> None:
    rng = np.random.default_rng(11)
    xs = rng.normal(3.0, 2.0, size=97).tolist()
    whole = panes.empty()
    for x in xs:
        panes.add(whole, x)
    parts = [panes.empty() for _ in range(7)]
    for i, x in enumerate(xs):
        panes.add(parts[i % 7], x)
    merged = panes.merged(parts)
    assert merged[0] == whole[0] == 97
    assert merged[3] == whole[3] == min(xs)
    assert merged[4] == whole[4] == max(xs)
    assert math.isclose(merged[1], float(np.mean(xs)), rel_tol=1e-12)
    assert math.isclose(merged[2], float(np.var(xs) * 97), rel_tol=1e-9)


def test_nulls_and_nans_are_skipped_as_sql_skips_nulls() -> None:
    pane = panes.empty()
    for v in (None, 2.0, float("nan"), 4.0, None):
        panes.add(pane, v)
    assert panes.value("count", pane) == 2
    assert panes.value("avg", pane) == 3.0
    assert panes.value("sum", pane) == 6.0
    assert panes.value("min", pane) == 2.0
    assert panes.value("max", pane) == 4.0
    assert panes.value("var_pop", pane) == 1.0


@pytest.mark.parametrize("function", FUNCTIONS)
def test_an_empty_window_counts_zero_and_is_null_otherwise(function: str) -> None:
    only_nulls = panes.empty()
    panes.add(only_nulls, None)
    for pane in (panes.empty(), only_nulls, panes.merged([]), panes.merged([panes.empty()] * 3)):
        assert panes.value(function, pane) == (0 if function == "count" else None)
    # no pane at all in the window's range
    far = {0: [panes.empty()]}
    panes.add(far[0][0], 5.0)
    assert panes.window_values([function], far, 100, 140) == [0 if function == "count" else None]


@pytest.mark.parametrize("function", FUNCTIONS)
def test_one_value_has_no_sample_deviation(function: str) -> None:
    pane = panes.empty()
    panes.add(pane, 7.5)
    got = panes.value(function, pane)
    if function in ("stddev", "stddev_samp", "std", "variance", "var_samp"):
        assert got is None
    elif function in ("stddev_pop", "var_pop"):
        assert got == 0.0
    elif function == "count":
        assert got == 1
    else:
        assert got == 7.5


def test_a_large_offset_keeps_the_variance_of_the_noise() -> None:
    """1e9 plus noise of 1e-3: a sum of squares would lose every digit of the variance in
    cancellation; the pairwise update keeps it."""
    rng = np.random.default_rng(5)
    noise = rng.normal(0.0, 1e-3, size=2_000)
    xs = (1e9 + noise).tolist()
    by_pane = panes_of(list(range(len(xs))), xs, 3)
    window = panes.window_values(["var_samp", "stddev_pop", "avg"], by_pane, 0, len(xs))
    # the reference: the same doubles, centred exactly before squaring
    want_var = statistics.variance(xs)
    assert math.isclose(window[0] or 0.0, want_var, rel_tol=1e-6)
    assert math.isclose(window[1] or 0.0, statistics.pstdev(xs), rel_tol=1e-6)
    assert math.isclose(window[2] or 0.0, statistics.fmean(xs), rel_tol=1e-15)
    # and the noise's own variance survives the offset (to the doubles' spacing at 1e9)
    assert math.isclose(window[0] or 0.0, float(np.var(noise, ddof=1)), rel_tol=1e-3)
    naive = (math.fsum(x * x for x in xs) - math.fsum(xs) ** 2 / len(xs)) / (len(xs) - 1)
    assert not math.isclose(naive, want_var, rel_tol=1e-1)  # what the panes avoid


def test_packed_partials_unpack_to_the_same_floats() -> None:
    pane = panes.empty()
    untouched = panes.empty()
    for v in (0.1, -3.25, 1e300, 7.0):
        panes.add(pane, v)
    packed = panes.pack([pane, untouched])
    assert isinstance(packed, bytes)
    assert panes.unpack(packed) == [pane, untouched]  # inf and -inf of an empty one included
    assert panes.unpack([pane]) == [pane]  # a state written before panes were packed
    by_start: dict[int, panes.Packed | list[panes.Pane]] = {0: packed, 10: [pane, untouched]}
    assert panes.window_values(["max", "count"], by_start, 0, 20) == [1e300, 0.0]
