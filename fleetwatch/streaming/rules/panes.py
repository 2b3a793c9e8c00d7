"""A windowed rule's aggregates from partial aggregates per slide ("panes"), pure.

A sliding window of ``size`` moving by ``slide`` is the union of ``size / slide`` panes of one
slide each, so a device keeps, per rule and per aggregated expression, one partial per pane —
count, mean and sum of squared deviations (Chan et al.'s pairwise update, stable where a sum of
squares is not), min and max — and a window's aggregate is its panes merged. The panes are
what a device's state holds of its readings: bounded by the window, whatever the rate. The
state holds a pane's partials packed (:func:`pack`): a few bytes objects unpickle in a fraction
of the time of as many lists of floats, and the state is unpickled and pickled again every
micro-batch.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping, Sequence

Pane = list[float]
"""``[count, mean, m2, min, max]`` of the non-null values of one expression in one pane; a
list of JSON's types, so that the state pickles and compares exactly."""

AGGREGATES = frozenset(
    {
        "count",
        "sum",
        "avg",
        "mean",
        "min",
        "max",
        "stddev",
        "stddev_samp",
        "std",
        "stddev_pop",
        "variance",
        "var_samp",
        "var_pop",
    }
)
"""The aggregate functions a windowed rule may use: those a window's value is exactly merged
from its panes' (an order statistic such as a percentile is not)."""


Packed = bytes
"""A pane's partials, one per aggregate, as consecutive little-endian doubles (:func:`pack`)."""
_DOUBLE = struct.Struct("<d")


def pack(partials: Sequence[Pane]) -> Packed:
    return struct.pack(f"<{5 * len(partials)}d", *(x for p in partials for x in p))


def unpack(packed: Packed | list[Pane]) -> list[Pane]:
    """A pane's partials; a state written before panes were packed holds them as lists."""
    if isinstance(packed, list):
        return packed
    flat = list(struct.unpack(f"<{len(packed) // _DOUBLE.size}d", packed))
    return [flat[i : i + 5] for i in range(0, len(flat), 5)]


def empty() -> Pane:
    return [0.0, 0.0, 0.0, math.inf, -math.inf]


def add(pane: Pane, value: float | None) -> None:
    """One value into ``pane`` (a null — a metric the reading lacks — is not counted, as SQL's
    aggregates skip nulls)."""
    if value is None or value != value:
        return
    n = pane[0] + 1
    delta = value - pane[1]
    pane[1] += delta / n
    pane[2] += delta * (value - pane[1])
    pane[0] = n
    pane[3] = min(pane[3], value)
    pane[4] = max(pane[4], value)


def merged(panes: Iterable[Pane]) -> Pane:
    out = empty()
    for p in panes:
        n = out[0] + p[0]
        if p[0] == 0:
            continue
        delta = p[1] - out[1]
        out[1] += delta * p[0] / n
        out[2] += p[2] + delta * delta * out[0] * p[0] / n
        out[0] = n
        out[3] = min(out[3], p[3])
        out[4] = max(out[4], p[4])
    return out


def value(function: str, pane: Pane) -> float | None:
    """``function`` (one of :data:`AGGREGATES`) of a window's merged pane, with SQL's answers
    for too few values: ``count`` is 0 and everything else null over no values; a sample
    deviation or variance is null over one."""
    n, mean, m2, low, high = pane
    if function == "count":
        return n
    if n == 0:
        return None
    if function == "sum":
        return mean * n
    if function in ("avg", "mean"):
        return mean
    if function == "min":
        return low
    if function == "max":
        return high
    if function in ("var_pop", "stddev_pop"):
        var = m2 / n
    elif n < 2:
        return None
    else:
        var = m2 / (n - 1)
    var = max(var, 0.0)
    return var if function.startswith("var") else math.sqrt(var)


def window_values(
    functions: Sequence[str], panes: Mapping[int, Packed | list[Pane]], start: int, end: int
) -> list[float | None]:
    """Each aggregate's value over the panes starting in ``[start, end)``; ``panes`` maps a
    pane's start to one partial per aggregate (in the order of ``functions``), packed or not."""
    inside = [unpack(p) for s, p in panes.items() if start <= s < end]
    return [value(f, merged(p[i] for p in inside)) for i, f in enumerate(functions)]
