"""Fleet-scope multivariate model: many devices' PCA moments pooled into one.

A :class:`~fleetwatch.models.multivariate.PcaDetector` keeps a decayed weight ``W``, a
weighted sum of ``y = x - shift`` and the scatter ``Σ w y yᵀ``, each decayed to its own
reference time ``ref_ms``. Pooling the devices of one kind (one scope) is exact, not an
average of models:

1. bring every device to the fleet's reference time (the latest ``ref_ms``), multiplying its
   moments by ``2^(-(ref - ref_i) / halflife)`` — the weight its rows would have had, had one
   detector learned them all;
2. pool the mean, ``M = Σ W_i m_i / Σ W_i``, and the scatter about it as within-device plus
   between-device parts, ``S = Σ (S_i - W_i m_i m_iᵀ) + Σ W_i (m_i - M)(m_i - M)ᵀ`` (in
   shifted coordinates, which is the same algebra).

Of devices that weigh alike and none outlying (see below), the result equals the moments of one
detector that learned every device's rows (up to float rounding), so its PCA is the PCA of the
concatenated data. Averaging per-device means or correlation matrices instead would drop the
between-device spread.

No one device can skew the pool (a winsorized mean over devices, of bounded weights):

- every device weighs at most what the median device weighs (its decayed ``W``): a device that
  reads a hundred times as often as its peers counts as one of them, not as a hundred;
- per metric, the :func:`left_out` most outlying devices — by their second moment about the
  devices' median mean, their variance plus their mean's squared offset — have their deviations
  from that median (their mean's offset and their spread about their mean) shrunk to the next
  one's: a noisy device, or one far off the others' level, would otherwise widen its scope's
  spread and so every young device's thresholds, yet the fleet keeps its spread of levels.

One device of ``n`` can then move the pooled second moment of a metric by at most a typical
device's share: its weight no more than the median device's (some ``1 / n`` of the pool's), its
second moment no more than the widest other device's.

The pooled model's grid per metric is the finest of the devices' where every device reads on
one (:mod:`~fleetwatch.models.grid`).

The pooled model also keeps the fleet's range of each metric: the values the devices hold normal
(each its mean ∓ ``RANGE_Z`` of its own standard deviations), from the ``RANGE_SHARE`` lowest
of their low ends to the ``RANGE_SHARE`` highest of their high ends, so that no single device —
one whose fault its own moments have learned — widens it for the fleet. With the pooled
correlations it tells a state the fleet knows — a machine stopped, as others of its kind are —
from one none of them is in (:meth:`PcaDetector.familiar_times`). It also keeps each device's
own ends (:func:`device_states`), and a state the fleet knows is one that some device holds: the
pooled moments alone allow combinations no device is in. Batteries whose voltage follows their
charge, each with a walk of its own, pool into a loose tie: a correlated fault (a voltage that
jumps as the charge falls) can sit inside that tie's alert level and inside both metrics'
ranges, yet at a charge and voltage no single battery holds together.

Devices that have learned nothing yet are left out. Devices whose metric sets or
hyperparameters differ from the rest cannot be pooled and are refused with the device named.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from fleetwatch.models.errors import FleetModelError
from fleetwatch.models.grid import GRID_SD, MIN_ON
from fleetwatch.models.multivariate import FloatArray, PcaDetector
from fleetwatch.models.profile import decay_factor
from fleetwatch.models.seasonal import EARLY_Z

logger = logging.getLogger(__name__)

RANGE_Z = EARLY_Z
"""How far past its mean, in its standard deviations, a device's normal readings of a metric
reach, for the fleet's range: the moments say nothing of a metric's tail, and a heavy-tailed
metric's normal readings pass ``ALERT_Z`` of them (a machine's vibration as it starts). The
same question as for a stream whose tail is still unknown, with the same answer
(:data:`~fleetwatch.models.seasonal.EARLY_Z`, twice ``ALERT_Z``)."""

RANGE_SHARE = 0.05
"""The share of devices whose extreme low or high end the fleet's range leaves out, at least
one of three or more: one device's spread, widened by a drift or step its moments learned,
would otherwise set the fleet's range, and a correlated break inside it would read as
familiar. The pooled moments shrink as many of the most outlying devices to the next one, and
the pooled tails leave them out (:func:`left_out`), for the same reason: one device's spread
would otherwise set the scope's."""


def pool_pca(device_params: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One fleet model's :class:`PcaDetector` parameters from ``{device_id: params}``
    (:func:`pool_detectors`)."""
    return pool_detectors({d: PcaDetector.from_params(p) for d, p in device_params.items()})


def pool_detectors(detectors: Mapping[str, PcaDetector]) -> dict[str, Any]:
    """One fleet model's :class:`PcaDetector` parameters from ``{device_id: detector}``.

    Raises :class:`FleetModelError` when no device is fitted, or when devices differ in
    hyperparameters or metric set.
    """
    fitted = {d: det for d, det in detectors.items() if det.metrics and det.weight > 0}
    if not fitted:
        raise FleetModelError(f"none of {len(detectors)} device(s) has fitted PCA parameters")
    skipped = len(detectors) - len(fitted)
    if skipped:
        logger.info("pooling %d device(s); %d not fitted yet, left out", len(fitted), skipped)
    first_id, first = next(iter(fitted.items()))
    hyper = first.hyperparameters()
    metrics = sorted(first.metrics)
    for device, det in fitted.items():
        if det.hyperparameters() != hyper:
            raise FleetModelError(
                f"device {device!r} has hyperparameters {det.hyperparameters()}, "
                f"device {first_id!r} {hyper}: they cannot be pooled"
            )
        if sorted(det.metrics) != metrics:
            raise FleetModelError(
                f"device {device!r} has metrics {sorted(det.metrics)}, "
                f"device {first_id!r} {metrics}: they cannot be pooled"
            )
    halflife_ms = first.halflife_ms
    ref_ms = max(det.ref_ms for det in fitted.values() if det.ref_ms is not None)

    weights, means, centrals, spreads, steps = [], [], [], [], []
    for det in fitted.values():
        order = [det.metrics.index(m) for m in metrics]
        step = det.grid.steps()
        step = step[order] if step.size == len(order) else np.zeros(len(order))
        steps.append(step)
        factor = decay_factor(det.ref_ms, ref_ms, halflife_ms)
        weight = det.weight * factor
        local_mean = det.sum[order] / det.weight
        # scatter about the device's own mean (decay scales it like the weight)
        central = det.scatter[np.ix_(order, order)] / det.weight - np.outer(local_mean, local_mean)
        weights.append(weight)
        means.append(det.shift[order] + local_mean)
        centrals.append(central)
        spreads.append(np.maximum(np.sqrt(np.maximum(np.diag(central), 0.0)), GRID_SD * step))
    w = np.asarray(weights)
    m: FloatArray = np.asarray(means)
    s: FloatArray = np.asarray(spreads)
    # the outlying devices' deviations from the median device winsorized, and every device
    # weighed at most as the median device
    shrunk = shrinkage(m, s)
    centre = np.median(m, axis=0)
    held: FloatArray = centre + shrunk * (m - centre)
    capped = np.minimum(w, np.median(w))
    total = float(capped.sum())
    pooled_mean: FloatArray = (capped @ held) / total
    dev = held - pooled_mean
    within = np.asarray(centrals) * (shrunk[:, :, None] * shrunk[:, None, :])
    scatter = np.einsum("i,ijk->jk", capped, within) + (dev * capped[:, None]).T @ dev

    fleet = PcaDetector(**hyper)
    fleet.metrics = metrics
    fleet.shift = pooled_mean
    fleet.weight = total
    fleet.sum = capped @ dev
    fleet.scatter = scatter
    fleet.count = sum(det.count for det in fitted.values())
    fleet.ref_ms = ref_ms
    # a metric's grid, where every device reads on one: the finest of theirs
    on_grid = np.asarray(steps)
    step = np.where((on_grid > 0).all(axis=0), on_grid.min(axis=0), 0.0)
    fleet.grid.grow(len(metrics))
    fleet.grid.rows[:, 0] = step
    fleet.grid.rows[:, 1] = np.where(step > 0, MIN_ON, 0.0)
    fleet.bounds = fleet_range(m - RANGE_Z * s, m + RANGE_Z * s)
    fleet.states = device_states(m - RANGE_Z * s, m + RANGE_Z * s, w)
    fleet.version = 1
    froms = [det.trained_from_ms for det in fitted.values() if det.trained_from_ms is not None]
    tos = [det.trained_to_ms for det in fitted.values() if det.trained_to_ms is not None]
    fleet.trained_from_ms = min(froms) if froms else None
    fleet.trained_to_ms = max(tos) if tos else None
    return fleet.to_params()


MAX_STATES = 256
"""The most devices' states a fleet model keeps (:func:`device_states`), the heaviest: the
champion's record carries them to every bucket of the scorer (256 states of 8 metrics are
4,096 numbers)."""


def device_states(lows: FloatArray, highs: FloatArray, weights: FloatArray) -> FloatArray:
    """The devices' states, stacked ``(2, devices, metrics)``: each device's (row's) own low
    and high end of every metric (column), a reading being a state some device holds when it
    lies within one device's ends on every metric. A device whose ends lie within a heavier
    one's adds nothing and is left out; at most :data:`MAX_STATES` are kept, the heaviest."""
    kept: list[int] = []
    for i in np.argsort(-weights, kind="stable"):
        covered = (lows[kept] <= lows[i]) & (highs[kept] >= highs[i])
        if not covered.all(axis=1).any():
            kept.append(int(i))
            if len(kept) == MAX_STATES:
                break
    return np.stack([lows[kept], highs[kept]])


def left_out(devices: int) -> int:
    """How many of ``devices`` the fleet leaves out at an extreme: the ``RANGE_SHARE`` share,
    one at least of three or more (of two, neither is the odd one)."""
    return max(1, int(RANGE_SHARE * devices)) if devices >= 3 else 0


def shrinkage(means: FloatArray, spreads: FloatArray) -> FloatArray:
    """Per device (row) and metric (column), the factor that winsorizes the device's deviations
    from the devices' median mean: the :func:`left_out` devices of the highest second moment
    about it, ``spread² + (mean - median)²``, brought down to the next device's (1: the
    others)."""
    n = len(means)
    drop = left_out(n)
    if not drop:
        return np.ones_like(means)
    second = spreads**2 + (means - np.median(means, axis=0)) ** 2
    cap = np.sort(second, axis=0)[n - 1 - drop]
    ratio = np.divide(cap, second, out=np.ones_like(second), where=second > cap)
    out: FloatArray = np.sqrt(ratio)
    return out


def fleet_range(lows: FloatArray, highs: FloatArray) -> FloatArray:
    """``[low, high]`` per metric (column) from the devices' (rows) own low and high ends: the
    ``RANGE_SHARE`` extreme devices on each side left out, one at least of three or more."""
    n = len(lows)
    drop = left_out(n)
    low = np.sort(lows, axis=0)[drop]
    high = np.sort(highs, axis=0)[n - 1 - drop]
    return np.stack([low, high])
