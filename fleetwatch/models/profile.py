"""Time-decayed moments per metric and per seasonal bucket, learned exactly in mini-batches.

The seasonal and change detectors share this: for each metric, exponentially time-decayed sums
``W = Σw``, ``Sx = Σw·y``, ``Sxx = Σw·y²`` of ``y = value - shift`` (``shift`` is the metric's
first value, which keeps ``Sxx/W - (Sx/W)²`` free of cancellation), once per bucket of the
period (hour of day by default) and once over all buckets. A row at event time ``t`` has weight
``w = 2^(-(T - t)/halflife)`` at reference time ``T`` (the newest event time learned), and the
sums are decayed by ``2^(-(T' - T)/halflife)`` when the reference moves on. Both are linear, so
learning one batch or the same rows in k mini-batches gives the same sums up to float rounding
(tested to 1e-9 relative); with ``halflife=None`` nothing decays and they are plain moments.

Expected value and variance at time ``t`` are those of a blend of the two buckets around ``t``,
weighted by how near ``t`` is to each centre: the mean interpolates linearly (a smooth daily
curve is followed to within a few percent of its amplitude with 24 buckets, where a step per
bucket would leave a residual that looks like a level shift), and the variance is the blend's,
``(1-f)·s0² + f·s1² + f(1-f)·(m1-m0)²``. The last term is small beside the noise for a smooth
curve (at most a third more spread midway, for a ±2 °C day under 0.3 °C noise) and decisive
where two neighbouring hours differ in kind: a machine that was stopped all of one hour and runs
in the next is not expected to turn at half speed, ± a few rpm, in between. Both fall back to
the metric's overall moments while either bucket is still warming up.

Two detector bases hold the hyperparameters of this machinery, checked once for every detector
that has them: :class:`DecayedDetector` (``halflife_hours``, for every detector whose sums fade
with event time) and :class:`ProfileDetector` (a profile's buckets and warm-up, for the
detectors that judge a metric against its profile).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetwatch.models import learned
from fleetwatch.models.base import Detector
from fleetwatch.models.batch import Batch, extend_metrics, frozen
from fleetwatch.models.errors import HyperParameterError, require_positive

FloatArray = npt.NDArray[np.float64]
Tables = tuple[FloatArray, FloatArray, npt.NDArray[np.bool_], npt.NDArray[np.bool_]]
"""Per (metric, bucket) mean, variance and warm flag, flattened; per metric whether it is warm."""
HOUR_MS = 3_600_000


def decay_factor(from_ms: int | None, to_ms: int, halflife_ms: float | None) -> float:
    if halflife_ms is None or from_ms is None:
        return 1.0
    return float(2.0 ** (-(to_ms - from_ms) / halflife_ms))


def advance(ref_ms: int | None, end_ms: int, halflife_ms: float | None) -> tuple[int, float]:
    """The reference time after a batch whose newest event time is ``end_ms`` (it never moves
    back), and the factor that decays sums kept at ``ref_ms`` to it."""
    to_ms = end_ms if ref_ms is None else max(ref_ms, end_ms)
    return to_ms, decay_factor(ref_ms, to_ms, halflife_ms)


def row_weights(
    event_ms: npt.NDArray[np.int64], to_ms: int, halflife_ms: float | None
) -> FloatArray:
    if halflife_ms is None:
        return np.ones(event_ms.size)
    out: FloatArray = np.exp2(-(to_ms - event_ms) / halflife_ms)
    return out


@dataclass
class SeasonalProfile:
    buckets: int
    period_ms: float
    halflife_ms: float | None
    metrics: list[str] = field(default_factory=list, init=False)
    shift: FloatArray = learned.per_metric()
    """Per metric, its first value."""
    sums: FloatArray = learned.per_metric(lambda p: (p.buckets + 1, 3))
    """(metric, bucket, [W, Sx, Sxx]); bucket index ``buckets`` holds the overall sums."""
    counts: npt.NDArray[np.int64] = learned.per_metric(lambda p: (p.buckets + 1,), counts=True)
    ref_ms: int | None = None
    _memo: dict[tuple[float, int, int], Tables] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """What :meth:`expect` derives from the sums, per (min_std, bucket_warmup, warmup): the
    scorer asks a detector's unchanged profile every batch. :meth:`learn` and :meth:`load`
    clear it."""

    def __post_init__(self) -> None:
        learned.start(self)

    def bucket_position(self, event_ms: npt.NDArray[np.int64]) -> tuple[Any, Any, FloatArray]:
        """For each time: the bucket centres before and after it, and the fraction between."""
        u = np.mod(event_ms, self.period_ms) / (self.period_ms / self.buckets) - 0.5
        below = np.floor(u)
        b0 = np.mod(below.astype(np.intp), self.buckets)
        return b0, np.mod(b0 + 1, self.buckets), u - below

    def learn(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> npt.NDArray[np.intp]:
        """Add the kept rows; returns the per-row metric indices (for the caller's own use)."""
        self._memo.clear()
        known = extend_metrics(self.metrics, batch)
        codes = batch.lookup(known)
        if len(known) > len(self.metrics):
            before = len(self.metrics)
            first = np.zeros(len(known))
            present, where = np.unique(codes, return_index=True)
            first[present] = batch.value[where]
            learned.grow(self, len(known))
            self.shift[before:] = first[before:]
            self.metrics = known
        to_ms, factor = advance(self.ref_ms, int(batch.event_ms[-1]), self.halflife_ms)
        self.sums *= factor
        self.ref_ms = to_ms
        rows = np.flatnonzero(keep)
        m, t = codes[rows], batch.event_ms[rows]
        y = batch.value[rows] - self.shift[m]
        w = row_weights(t, to_ms, self.halflife_ms)
        b = np.floor(np.mod(t, self.period_ms) / (self.period_ms / self.buckets)).astype(np.intp)
        width = self.buckets + 1
        groups = np.concatenate(
            [m * width + np.minimum(b, self.buckets - 1), m * width + self.buckets]
        )
        size = len(self.metrics) * width
        flat = self.sums.reshape(size, 3)
        for j, contrib in enumerate((w, w * y, w * y * y)):
            flat[:, j] += np.bincount(
                groups, weights=np.concatenate([contrib, contrib]), minlength=size
            )
        self.counts += np.bincount(groups, minlength=size).reshape(self.counts.shape)
        return codes

    def moments(self, min_std: float) -> tuple[FloatArray, FloatArray]:
        """Mean and standard deviation per (metric, bucket), NaN where nothing was learned."""
        w = self.sums[..., 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            mean_y = self.sums[..., 1] / w
            var = np.maximum(self.sums[..., 2] / w - mean_y * mean_y, min_std * min_std)
        return mean_y + self.shift[:, None], np.sqrt(var)

    def expect(
        self,
        codes: npt.NDArray[np.intp],
        event_ms: npt.NDArray[np.int64],
        warmup: int,
        bucket_warmup: int,
        min_std: float,
        position: tuple[Any, Any, FloatArray] | None = None,
    ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
        """Per row: expected value, standard deviation, and whether the metric is warm
        (``position``: :meth:`bucket_position` of ``event_ms``, when already known)."""
        known = codes >= 0
        if not known.any():
            return np.full(codes.size, np.nan), np.full(codes.size, np.nan), known
        mu, var_b, warm, ready = self._tables(min_std, bucket_warmup, warmup)
        m = np.where(known, codes, 0)
        b0, b1, frac = self.bucket_position(event_ms) if position is None else position
        # (metric, bucket) entries by their index in the flattened tables: one lookup each
        at = m * (self.buckets + 1)
        i0, i1, overall = at + b0, at + b1, at + self.buckets
        seasonal = warm[i0] & warm[i1]
        mu0, mu1 = mu[i0], mu[i1]
        rest = 1 - frac
        mean = np.where(seasonal, rest * mu0 + frac * mu1, mu[overall])
        gap = mu1 - mu0
        blend = rest * var_b[i0] + frac * var_b[i1] + frac * rest * gap**2
        var = np.where(seasonal, blend, var_b[overall])
        ok = known & ready[m]
        return mean, np.sqrt(var), ok

    def _tables(self, min_std: float, bucket_warmup: int, warmup: int) -> Tables:
        """Per (metric, bucket) mean, variance and warm flag, flattened (entry ``(m, b)`` at
        ``m * (buckets + 1) + b``); per metric whether it is warm."""
        key = (min_std, bucket_warmup, warmup)
        held = self._memo.get(key)
        if held is None:
            mu, sd = self.moments(min_std)
            warm = (self.counts >= bucket_warmup) & (self.sums[..., 0] > 0)
            overall = self.buckets
            ready = (self.counts[:, overall] >= warmup) & (self.sums[:, overall, 0] > 0)
            held = (mu.ravel(), (sd**2).ravel(), warm.ravel(), ready)
            self._memo[key] = held
        return held

    def state(self) -> dict[str, Any]:
        return {"metrics": list(self.metrics), **learned.state(self), "ref_ms": self.ref_ms}

    def load(self, state: Mapping[str, Any]) -> None:
        self._memo.clear()
        self.metrics = [str(m) for m in state["metrics"]]
        learned.load(self, state, len(self.metrics))
        self.ref_ms = None if state["ref_ms"] is None else int(state["ref_ms"])


@dataclass(eq=False, kw_only=True)
class DecayedDetector(Detector):
    """A detector whose learned sums fade with event time (:func:`decay_factor`).

    Its hyperparameters are dataclass fields, which the constructor takes by keyword; a subclass
    declares its own (or a new default for one of these) and checks them in ``__post_init__``
    after this one's.

    Parameters: ``halflife_hours``, the age in event time at which a reading counts half
    (``None``: nothing fades).
    """

    halflife_hours: float | None = 168.0

    def __post_init__(self) -> None:
        require_positive(self, "halflife_hours", or_none=True)

    @property
    def halflife_ms(self) -> float | None:
        return None if self.halflife_hours is None else self.halflife_hours * HOUR_MS


@dataclass(eq=False, kw_only=True)
class ProfileDetector(DecayedDetector):
    """A detector that judges each metric against its :class:`SeasonalProfile`
    (:attr:`profile`): the seasonal, level and change detectors.

    Parameters: ``buckets`` per ``period_hours`` (1: no season), ``warmup`` (a metric's
    readings learned before it is judged), ``bucket_warmup`` (a bucket's readings before it is
    used, the metric's overall moments until then), ``min_std`` (the floor of a standard
    deviation, in the metric's units).
    """

    buckets: int = 24
    period_hours: float = 24.0
    warmup: int = 30
    bucket_warmup: int = 20
    min_std: float = 1e-3
    profile: SeasonalProfile = field(init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.buckets < 1 or not self.period_hours > 0:
            raise HyperParameterError(
                f"need buckets >= 1 and period_hours > 0, got {self.buckets}, {self.period_hours}"
            )
        require_positive(self, "min_std")
        self.profile = self.new_profile()

    def new_profile(self) -> SeasonalProfile:
        """An empty profile of these hyperparameters."""
        return SeasonalProfile(self.buckets, self.period_hours * HOUR_MS, self.halflife_ms)

    def _expect(
        self, batch: Batch, codes: npt.NDArray[np.intp]
    ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
        """Per row of ``batch`` (its metrics' ``codes`` in :attr:`profile`): the expected value,
        the standard deviation, and whether the metric is warm (:meth:`SeasonalProfile.expect`)."""
        profile = self.profile
        # the same for every profile of the same period and buckets: worked out once per batch
        key = ("bucket_position", profile.period_ms, profile.buckets)
        position = batch.memo.get(key)
        if position is None:
            b0, b1, frac = profile.bucket_position(batch.event_ms)
            position = batch.memo[key] = (frozen(b0), frozen(b1), frozen(frac))
        return profile.expect(
            codes, batch.event_ms, self.warmup, self.bucket_warmup, self.min_std, position
        )

    def learned_metrics(self) -> list[str]:
        return list(self.profile.metrics)
