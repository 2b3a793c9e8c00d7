"""Labelled anomalies: when each starts, what it does to a reading, and its truth record.

Anomalies are planned per device in sequence-number space from counter-based draws, so the
plan does not depend on the rest of the fleet. At most one anomaly is active per device; the
next one is planned after it ends. The truth record is written when an anomaly ends, with the
event times of the first and last reading it affected (true clock, before any device skew).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from fleetwatch.simulator.kinds import Kind
from fleetwatch.simulator.noise import Noise, extreme, quantise
from fleetwatch.simulator.randomness import F64, device_uniform, normal
from fleetwatch.simulator.scenario import AnomalySpec

# random streams
_GAP, _KIND, _LEN, _MAG, _METRIC, _SIGN, _BURST = 101, 102, 103, 104, 105, 106, 107


class Extent(NamedTuple):
    """The range an anomaly kind draws from."""

    readings: tuple[int, int]
    """How many readings it lasts: the fewest, the most."""
    scales: tuple[float, float]
    """How far it moves a metric, in the metric's scales: the least, the most."""


EXTENTS: dict[str, Extent] = {
    "spike": Extent((1, 1), (5.0, 9.0)),
    "dip": Extent((1, 1), (5.0, 9.0)),
    "level_shift": Extent((20, 60), (3.0, 5.0)),
    "drift": Extent((30, 120), (3.0, 6.0)),
    "stuck": Extent((20, 60), (0.0, 0.0)),
    "noise_burst": Extent((10, 30), (2.0, 4.0)),
    "dropout": Extent((10, 40), (0.0, 0.0)),
    "correlated": Extent((10, 30), (3.0, 5.0)),
}
ALL_METRICS = ("dropout", "correlated")
ONE_READING = ("spike", "dip")
VISIBLE, RARE = 2.0, 1e-4
"""A one-reading anomaly is at least ``VISIBLE`` times the deviation its metric's normal
readings pass once in ``1 / RARE`` (its per-reading error's tail, outside bursts): heavy-tailed
noise would otherwise hide some spikes among its own shocks (:func:`smallest`)."""


@dataclass
class Anomaly:
    """One anomaly on one device: planned, then active, then written as truth."""

    device_id: str
    kind: str
    columns: tuple[int, ...]
    metrics: tuple[str, ...]
    start_seq: int
    end_seq: int
    """Last affected seq (inclusive) as planned; calibrate may end a drift earlier."""
    offsets: tuple[float, ...]
    """Signed magnitude per affected column, in the metric's units."""
    first_ts: int | None = None
    last_ts: int | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def apply(self, row: F64, seq: int, stuck: F64 | None, burst: float) -> bool:
        """Change ``row`` in place for reading ``seq``; False when the reading is not sent."""
        if self.kind == "dropout":
            return False
        if self.kind == "stuck" and stuck is not None:
            for c in self.columns:
                row[c] = stuck[c]
        elif self.kind == "drift":
            ramp = (seq - self.start_seq + 1) / (self.end_seq - self.start_seq + 1)
            for c, off in zip(self.columns, self.offsets, strict=True):
                row[c] += off * ramp
        elif self.kind == "noise_burst":
            for c, off in zip(self.columns, self.offsets, strict=True):
                row[c] += abs(off) * math.copysign(0.5 + abs(burst), burst)
        else:  # spike, dip, level_shift, correlated
            for c, off in zip(self.columns, self.offsets, strict=True):
                row[c] += off
        return True

    def truth(self) -> dict[str, Any]:
        return {
            "class": "anomaly",
            "device_id": self.device_id,
            "kind": self.kind,
            "metric": self.metrics[0] if len(self.metrics) == 1 else None,
            "metrics": list(self.metrics),
            "seq": self.start_seq,
            "start_ms": self.first_ts,
            "end_ms": self.last_ts,
            "params": {"offsets": [round(o, 4) for o in self.offsets], **self.params},
        }


class Planner:
    """Draws each device's anomalies: gap, kind, length, metric, size (all counter-based)."""

    def __init__(self, spec: AnomalySpec, seed: int, interval_ms: int) -> None:
        self.spec = spec
        self.seed = seed
        per_reading = spec.per_device_hour * interval_ms / 3_600_000
        self.p = min(per_reading, 0.5)
        self.warmup_readings = math.ceil(spec.warmup_s * 1000 / interval_ms)
        kinds = list(spec.mix)
        weights = np.array([spec.mix[k] for k in kinds])
        self.kinds = kinds
        self.cumulative = np.cumsum(weights) / weights.sum()

    @property
    def enabled(self) -> bool:
        return self.p > 0

    def _u(self, stream: int, device: int, n: int) -> float:
        return device_uniform(self.seed, stream * 1_000_003 + n, device)

    def next_start(self, device: int, n: int, after_seq: int) -> int:
        """Seq at which device's ``n``-th anomaly starts, the earliest being ``after_seq``."""
        if not self.enabled:
            return 2**62
        gap = math.ceil(math.log(self._u(_GAP, device, n)) / math.log1p(-self.p))
        return max(after_seq, self.warmup_readings) + max(gap, 1)

    def plan(
        self,
        device: int,
        device_id: str,
        n: int,
        start_seq: int,
        kind: Kind,
        noise: Noise,
        still: Sequence[int] = (),
    ) -> Anomaly:
        """Device's ``n``-th anomaly, from ``start_seq``; a stuck value is put on one of the
        metrics that ``still`` does not list, unless it lists them all (:func:`resting`)."""
        name = self.kinds[int(np.searchsorted(self.cumulative, self._u(_KIND, device, n)))]
        low, high = EXTENTS[name].readings
        length = low + int(self._u(_LEN, device, n) * (high - low + 1))
        if name in ALL_METRICS:
            columns = tuple(range(len(kind.metrics)))
        else:
            among: Sequence[int] = range(len(kind.metrics))
            if name == "stuck":
                among = [c for c in among if c not in still] or among
            columns = (among[int(self._u(_METRIC, device, n) * len(among))],)
        mlow, mhigh = EXTENTS[name].scales
        size = mlow + (mhigh - mlow) * self._u(_MAG, device, n)
        if name in ONE_READING:
            size += max(0.0, smallest(kind, noise, columns[0]) - mlow)
        sign = -1.0 if name == "dip" else 1.0
        if name in ("level_shift", "drift") and self._u(_SIGN, device, n) < 0.5:
            sign = -1.0
        offsets = tuple(
            sign * (-1.0 if name == "correlated" and i % 2 else 1.0) * size * kind.scales[c]
            for i, c in enumerate(columns)
        )
        return Anomaly(
            device_id=device_id,
            kind=name,
            columns=columns,
            metrics=tuple(kind.metrics[c] for c in columns),
            start_seq=start_seq,
            end_seq=start_seq + length - 1,
            offsets=offsets,
        )

    def burst(self, device: int, seq: int) -> float:
        return float(normal(self.seed, _BURST, np.array([device]), np.array([seq]))[0])


def smallest(kind: Kind, noise: Noise, column: int) -> float:
    """The smallest spike or dip, in scales, that stands out of ``column``'s normal readings:
    ``VISIBLE`` times the deviation they pass once in ``1 / RARE``. Under the Gaussian noise
    (and most realistic noises) it is below the smallest size drawn, which then stands; a
    running machine's vibration, heavy-tailed, has its spikes and dips moved up by the
    difference."""
    spread = kind.errors[column] / kind.scales[column]
    return VISIBLE * spread * extreme(noise.df, RARE)


RECENT = 8
"""Readings a metric must repeat one value over (the anomaly's first and the ones before it)
to count as resting, not moving, when a stuck value is planned."""


def resting(kind: Kind, noise: Noise, recent: F64) -> list[int]:
    """The metrics a stuck value would not visibly stop, given a device's latest readings
    (``RECENT`` rows, the anomaly's first last): those whose resolution is not finer than their
    reading-to-reading error (a whole-per-cent charge level repeats for half an hour of normal
    readings), and, unless it leaves none, those that repeated one value over ``recent`` (a
    stopped machine's 0 rpm). Under the Gaussian noise (``Noise()``) none: that scenario plans
    stuck values on every metric, blind spots included, so its runs stay comparable."""
    if noise == Noise():
        return []
    steps = noise.steps(kind.metrics)
    rows = np.array(recent, dtype=np.float64)
    quantise(rows, steps)
    coarse = [c for c, error in enumerate(kind.errors) if steps[c] >= error]
    flat = (rows == rows[0]).all(axis=0)
    still = [c for c in range(len(kind.metrics)) if c in coarse or flat[c]]
    return coarse if len(still) == len(kind.metrics) else still


def legacy_spike(device_id: str, metric: str, seq: int, ts: int, size: float) -> dict[str, Any]:
    """The truth of a ``spike_every`` spike (a one-reading spike of a fixed size)."""
    return {
        "class": "anomaly",
        "device_id": device_id,
        "kind": "spike",
        "metric": metric,
        "metrics": [metric],
        "seq": seq,
        "start_ms": ts,
        "end_ms": ts,
        "params": {"offsets": [size], "spike_every": True},
    }
