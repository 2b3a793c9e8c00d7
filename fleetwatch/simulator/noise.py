"""How readings stray from a kind's clean signal, beyond what an anomaly does.

Gaussian noise is what the detectors assume, so a simulator that only draws it flatters them.
Real sensors add, all of it normal:

- **heavy tails**: Student-t noise (``df`` degrees of freedom, scaled to the same variance);
- **a wandering offset** (``walk``): slow, mean-reverting, bounded — an Ornstein-Uhlenbeck-like
  process of time constant ``walk_minutes``, built as a sum of :data:`WANDER_TERMS` cosines
  whose frequencies are drawn from its Lorentzian spectrum, so that it is a pure function of
  (seed, device, event time) like every other draw, and never exceeds ``sqrt(2·terms)`` times
  its standard deviation;
- **benign level changes** (``level_changes_per_hour``, ``level_change``): a step that stays
  until the next one — a load switched on, then off; a setpoint moved, then back — once in each
  period of ``1 / rate`` at a random time within it: alternately away from the base level, by
  0.5 to 1 ``level_change`` either way, and back to it;
- **bursts** (``bursts_per_hour``, ``burst_s``, ``burst_gain``): periods of noisier readings,
  one at a random time within each period of ``1 / rate``;
- **quantisation** (``resolution``, per metric): readings rounded to the sensor's step;
- **sampling jitter** (``jitter``): each reading up to that fraction of the interval later than
  its nominal time, so intervals vary within ``(1 ± jitter) · interval`` and the mean rate is
  the nominal one.

Sizes are in multiples of each metric's ``scale`` (:class:`~fleetwatch.simulator.kinds.Kind`),
as anomaly magnitudes are. Level changes and bursts are normal: the truth records them with
``"class": "normal"`` (:meth:`Draws.benign_labels`), which evaluation does not count as
anomalies, so an alert on one is a false alert. A :class:`Noise` with every knob at its
default is the Gaussian noise the simulator drew first, draw for draw.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetwatch.simulator.errors import ScenarioError
from fleetwatch.simulator.randomness import F64, shared_uniform, student_t, uniform

I64 = npt.NDArray[np.int64]
HOUR_MS = 3_600_000
WANDER_TERMS = 32
WANDER_MAX_RATE = 20.0
"""Highest frequency of the wander's cosines, in radians per time constant: the wander stays
slow (a cosine faster than this would look like sampled noise, not like a drifting offset)."""

# random streams (distinct from the kinds', the anomalies' and the misbehaviour's)
_LEVEL_AT, _LEVEL_VALUE, _BURST_LEN, _BURST_AT, _JITTER = 301, 302, 303, 304, 305
NO_BURST = -1

KNOBS = (
    "df",
    "walk",
    "walk_minutes",
    "level_changes_per_hour",
    "level_change",
    "bursts_per_hour",
    "burst_s",
    "burst_gain",
    "jitter",
    "resolution",
)


@dataclass(frozen=True)
class Noise:
    """One kind's noise. The defaults switch every component off (Gaussian noise)."""

    df: float = math.inf
    """Degrees of freedom of the per-reading noise (> 2; ``inf``: Gaussian)."""
    walk: float = 0.0
    """Standard deviation of the wandering offset, in scales (0: none)."""
    walk_minutes: float = 20.0
    """Its time constant: how long it takes to forget where it was."""
    level_changes_per_hour: float = 0.0
    level_change: float = 0.0
    """A benign level is 0.5 to 1 times this many scales away from the base, either way."""
    bursts_per_hour: float = 0.0
    burst_s: tuple[float, float] = (10.0, 60.0)
    """A burst's length in seconds, [shortest, longest]."""
    burst_gain: float = 1.0
    """The per-reading noise is this many times larger during a burst."""
    jitter: float = 0.0
    """Each reading is up to this fraction of the interval later than its nominal time."""
    resolution: dict[str, float] = field(default_factory=dict)
    """Per metric, the step readings are rounded to (absent or 0: not rounded)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "burst_s", tuple(self.burst_s))
        object.__setattr__(self, "resolution", dict(self.resolution))
        numbers = [getattr(self, k) for k in KNOBS if k not in ("df", "burst_s", "resolution")]
        numbers += [*self.burst_s, *self.resolution.values()]
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in [self.df, *numbers]):
            raise ScenarioError("noise knobs must be numbers")
        if not self.df > 2:
            raise ScenarioError(f"noise df must be above 2 (inf: Gaussian), got {self.df}")
        if not all(math.isfinite(v) and v >= 0 for v in numbers):
            raise ScenarioError("noise knobs must be finite and not negative")
        if self.walk_minutes <= 0:
            raise ScenarioError("noise walk_minutes must be positive")
        low, high = self.burst_s if len(self.burst_s) == 2 else (1.0, 0.0)
        if not 0 < low <= high:
            raise ScenarioError("noise burst_s must be [low, high] with 0 < low <= high")
        if self.burst_gain < 1:
            raise ScenarioError("noise burst_gain must be at least 1")
        if self.jitter >= 1:
            raise ScenarioError(f"noise jitter must be below 1 (a fraction), got {self.jitter}")

    def steps(self, metrics: tuple[str, ...]) -> F64:
        """The resolution of each of ``metrics`` (0: not rounded)."""
        return np.array([float(self.resolution.get(m, 0.0)) for m in metrics])


# ---- the components ------------------------------------------------------------------------


def lateness_ms(seed: int, device: I64, seq: I64, interval: I64, jitter: F64) -> I64:
    """How late each reading is against its nominal time: uniform in [0, jitter · interval)."""
    if not np.any(jitter > 0):
        return np.zeros(np.shape(seq), dtype=np.int64)
    late = uniform(seed, _JITTER, device, seq) * jitter * interval
    return late.astype(np.int64)


def wander(seed: int, stream: int, device: I64, ts: I64, minutes: float) -> F64:
    """A unit-variance offset that wanders with time constant ``minutes``, per device.

    Its autocovariance over devices is ``exp(-|lag| / tau)`` (the Ornstein-Uhlenbeck process's,
    for lags above ``tau / WANDER_MAX_RATE``): cosines with Cauchy-distributed frequencies of
    scale ``1 / tau`` and uniform phases, each of amplitude ``sqrt(2 / terms)``. Uses ``stream``
    and ``stream + 1``."""
    rate, phase = _wander_terms(seed, stream, np.asarray(device))
    tau_ms = minutes * 60_000.0
    angle = rate * (np.asarray(ts, dtype=np.float64)[:, None] / tau_ms) + phase
    out: F64 = np.cos(angle).sum(axis=1) * math.sqrt(2.0 / WANDER_TERMS)
    return out


_TERMS: dict[tuple[int, int, int], tuple[F64, F64]] = {}


def _wander_terms(seed: int, stream: int, device: I64) -> tuple[F64, F64]:
    """Each device's cosines (rates per time constant, phases), drawn once per process."""
    rows = []
    for d in device.tolist():
        terms = _TERMS.get((seed, stream, d))
        if terms is None:
            k = np.arange(WANDER_TERMS)
            spread = math.atan(WANDER_MAX_RATE)
            rate = np.tan((2.0 * uniform(seed, stream, d, k) - 1.0) * spread)
            terms = rate, 2.0 * np.pi * uniform(seed, stream + 1, d, k)
            if len(_TERMS) > 100_000:
                _TERMS.clear()
            _TERMS[(seed, stream, d)] = terms
        rows.append(terms)
    if not rows:
        return np.zeros((0, WANDER_TERMS)), np.zeros((0, WANDER_TERMS))
    return np.stack([r for r, _ in rows]), np.stack([p for _, p in rows])


@dataclass(frozen=True)
class Levels:
    """The benign level each reading is at: its value (0, or ±0.5 to ±1), which change it
    follows (the period it happened in) and when that change happened."""

    value: F64
    segment: I64
    since_ms: I64


def levels(seed: int, device: I64, ts: I64, per_hour: float) -> Levels:
    """One change in each period of ``1 / per_hour``, at a uniform time within it: after an
    even period's change the level is the base (0), after an odd one's it is away from it."""
    period = HOUR_MS / per_hour
    slot = np.floor(np.asarray(ts) / period).astype(np.int64)
    at = (slot + shared_uniform(seed, _LEVEL_AT, device, slot)) * period
    reached = np.asarray(ts) >= at
    segment = np.where(reached, slot, slot - 1)
    before = (slot - 1 + shared_uniform(seed, _LEVEL_AT, device, slot - 1)) * period
    since = np.where(reached, at, before).astype(np.int64)
    return Levels(level_value(seed, device, segment), segment, since)


def level_value(seed: int, device: I64, segment: I64) -> F64:
    """The level after a period's change: the base (0) after an even period's, 0.5 to 1 away
    from it, either way, after an odd one's."""
    away = 2.0 * shared_uniform(seed, _LEVEL_VALUE, device, segment) - 1.0
    out: F64 = np.where(segment % 2 == 1, np.sign(away) * (0.5 + 0.5 * np.abs(away)), 0.0)
    return out


@dataclass(frozen=True)
class Bursts:
    """Per reading: the burst it falls in (its period, or ``NO_BURST``) and that burst's span."""

    burst: I64
    start_ms: I64
    end_ms: I64


def bursts(
    seed: int, device: I64, ts: I64, per_hour: float, burst_s: tuple[float, float]
) -> Bursts:
    """One burst in each period of ``1 / per_hour`` (cut to the period if longer)."""
    period = HOUR_MS / per_hour
    stamps = np.asarray(ts)
    slot = np.floor(stamps / period).astype(np.int64)
    low, high = burst_s
    drawn = low + (high - low) * shared_uniform(seed, _BURST_LEN, device, slot)
    length = np.minimum(drawn * 1000, period)
    start = slot * period + shared_uniform(seed, _BURST_AT, device, slot) * (period - length)
    inside = (stamps >= start) & (stamps < start + length)
    return Bursts(
        np.where(inside, slot, NO_BURST),
        start.astype(np.int64),
        (start + length).astype(np.int64),
    )


@functools.lru_cache(maxsize=64)
def extreme(df: float, rarity: float) -> float:
    """The deviation a unit-variance per-reading error (Student-t with ``df``; ``inf``:
    Gaussian) passes with probability ``rarity``, either way.

    From the polar draw: ``|T| = R·|cos θ|`` with ``P(R > r) = (1 + r²/df)^(-df/2)`` (Gaussian:
    ``exp(-r²/2)``) and ``θ`` uniform, so ``P(|T| > x)`` is a one-dimensional integral over
    ``θ`` (Craig's formula for the Gaussian), solved for ``x`` by bisection."""
    theta = (np.arange(4000) + 0.5) * (np.pi / 2 / 4000)
    cos2 = np.cos(theta) ** 2
    unit = 1.0 if math.isinf(df) else math.sqrt(df / (df - 2.0))

    def beyond(x: float) -> float:
        r2 = (x * unit) ** 2 / cos2
        tail = np.exp(-r2 / 2.0) if math.isinf(df) else (1.0 + r2 / df) ** (-df / 2.0)
        return float(tail.mean())

    low, high = 0.0, 1e6
    for _ in range(100):
        mid = (low + high) / 2.0
        low, high = (mid, high) if beyond(mid) > rarity else (low, mid)
    return (low + high) / 2.0


def quantise(values: F64, steps: F64) -> None:
    """Round each column of ``values`` in place to its step (a step of 0 leaves it as it is)."""
    for c in np.flatnonzero(steps > 0).tolist():
        values[:, c] = np.round(values[:, c] / steps[c]) * steps[c]


def decimals(step: float, default: int) -> int:
    """Decimals that write a multiple of ``step`` exactly (``default`` when not rounded)."""
    if step <= 0:
        return default
    for places in range(10):
        scaled = step * 10**places
        if abs(scaled - round(scaled)) < 1e-9 * max(scaled, 1.0):
            return places
    return default


# ---- one call's draws ----------------------------------------------------------------------


@dataclass(frozen=True)
class Draws:
    """One call's readings (of one kind's devices) and what its noise adds to their clean
    signal; a kind's generator turns them into values."""

    noise: Noise
    seed: int
    device: I64
    seq: I64
    ts: I64

    @functools.cached_property
    def _levels(self) -> Levels | None:
        n = self.noise
        if n.level_changes_per_hour <= 0 or n.level_change == 0:
            return None
        return levels(self.seed, self.device, self.ts, n.level_changes_per_hour)

    @functools.cached_property
    def _bursts(self) -> Bursts | None:
        n = self.noise
        if n.bursts_per_hour <= 0:
            return None
        return bursts(self.seed, self.device, self.ts, n.bursts_per_hour, n.burst_s)

    @functools.cached_property
    def gain(self) -> F64 | float:
        """The per-reading noise's multiplier: ``burst_gain`` within a burst, else 1."""
        if self._bursts is None or self.noise.burst_gain == 1:
            return 1.0
        return np.where(self._bursts.burst != NO_BURST, self.noise.burst_gain, 1.0)

    def error(self, stream: int) -> F64:
        """Per-reading measurement error of unit variance (Student-t; larger within a burst)."""
        return student_t(self.seed, stream, self.device, self.seq, self.noise.df) * self.gain

    @functools.cached_property
    def level(self) -> F64 | float:
        """The benign level, in scales (0 without level changes)."""
        return 0.0 if self._levels is None else self.noise.level_change * self._levels.value

    def walk(self, stream: int) -> F64 | float:
        """The wandering offset, in scales (0 without one); uses ``stream`` and ``stream + 1``."""
        n = self.noise
        if n.walk <= 0:
            return 0.0
        return n.walk * wander(self.seed, stream, self.device, self.ts, n.walk_minutes)

    def offset(self, stream: int) -> F64 | float:
        """The wander plus the benign level, in scales."""
        return self.walk(stream) + self.level

    # ---- the truth --------------------------------------------------------------------------

    def benign_labels(self, before: I64) -> Iterator[tuple[int, dict[str, Any]]]:
        """(index, label) of each reading that is the first after a level change or the first
        in a burst; ``before`` is each device's previous reading's time (negative: none). A
        label is a truth record without its device: ``class`` normal, ``kind`` ``level_change``
        or ``burst``, event times and ``params``."""
        known = np.asarray(before) >= 0
        if self._levels is not None:
            now = self._levels
            for i in np.flatnonzero(known & (before < now.since_ms)).tolist():
                segment = now.segment[i : i + 1]
                was = level_value(self.seed, self.device[i : i + 1], segment - 1)
                change = self.noise.level_change * (float(now.value[i]) - float(was[0]))
                at = int(now.since_ms[i])
                yield i, _label("level_change", at, at, change=round(change, 4))
        if self._bursts is not None:
            b = self._bursts
            for i in np.flatnonzero(known & (b.burst != NO_BURST) & (before < b.start_ms)).tolist():
                start, end = int(b.start_ms[i]), int(b.end_ms[i])
                yield i, _label("burst", start, end, gain=self.noise.burst_gain)


def _label(kind: str, start_ms: int, end_ms: int, **params: Any) -> dict[str, Any]:
    return {
        "class": "normal",
        "kind": kind,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "params": params,
    }


def merged(base: Noise, overrides: Mapping[str, Any]) -> Noise:
    """``base`` with ``overrides`` applied; a ``resolution`` override adds to the base's."""
    given = dict(overrides)
    unknown = sorted(set(given) - set(KNOBS))
    if unknown:
        raise ScenarioError(f"unknown noise knob: {', '.join(unknown)} (known: {', '.join(KNOBS)})")
    if "resolution" in given:
        if not isinstance(given["resolution"], Mapping):
            raise ScenarioError("noise resolution must be a table of metric = step")
        given["resolution"] = {**base.resolution, **given["resolution"]}
    fields = {k: getattr(base, k) for k in KNOBS} | given
    try:
        return Noise(**fields)
    except TypeError as exc:
        raise ScenarioError(f"noise: {exc}") from exc
