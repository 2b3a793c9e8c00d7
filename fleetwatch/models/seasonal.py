"""The seasonal baseline: each metric against its own daily profile.

Per device and metric, time-decayed mean and variance per hour-of-day bucket (see
:class:`~fleetwatch.models.profile.SeasonalProfile`), interpolated between bucket centres. A
reading's statistic is ``|z| = |value - expected| / std``, judged against the metric's own
history of ``|z|`` (:class:`~fleetwatch.models.tail.StreamTail`): a row alerts when ``|z|`` passes
the level that the stream's excursions pass ``false_alerts_per_day`` times a day (shared by the
device's metrics), never below about 4.9 (a normal ``p = 1e-6``); its surprise is the stream's
own ``-ln P(X >= |z|)``, scaled so that the threshold is the common alert level. Heavy tails,
bursts and a second regime the profile cannot hold raise the threshold of that stream alone.
With ``false_alerts_per_day=None`` the surprise is the two-sided normal tail of ``z`` (a model's,
not the stream's: for noise that is Gaussian).

Robustness comes from the exclusion policy of :mod:`base`: rows that alert (the scorer's flags,
or by default the detector's own pre-batch scores) are not learned, so a spike does not widen
the band and a long fault does not become the expected value.

Warm-up: no row of a metric is scored before ``warmup`` readings of it were learned. Until its tail
holds ``MIN_HISTORY`` (200) values of ``|z|`` (about 230 readings) a metric is judged against
``EARLY_Z``, twice the floor (its rows' reason ``EARLY``: the scorer's fixed baseline judges them
too): judged with a normal model's threshold, a heavy-tailed stream alerted in its first minutes,
and those alerts kept its readings out of every member's learning; not judged at all, a machine
started in those minutes became part of its normal. Readings learned before the profile was warm
are measured against it as learned after their batch, so a first batch, however long, leaves the
tail a history. A bucket is used once it has ``bucket_warmup`` readings, the metric's overall
moments until then.

Hyperparameters: ``halflife_hours`` (memory of the moments in event time; ``None`` never
forgets), ``buckets`` per ``period_hours`` (1 disables seasonality), ``warmup``,
``bucket_warmup``, ``min_std`` (floor of the standard deviation, in the metric's units),
``false_alerts_per_day``, ``tail_halflife`` (readings; the tail's memory, its excursions' ten
times that).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import numpy as np
import numpy.typing as npt

from fleetwatch.models.base import Detector
from fleetwatch.models.batch import Batch, per_metric_runs
from fleetwatch.models.calibration import ALERT_Z, S_ALERT, normal_two_sided_surprise
from fleetwatch.models.errors import HyperParameterError, ParamsError
from fleetwatch.models.grid import Grid, floor_std, shrink
from fleetwatch.models.profile import HOUR_MS, SeasonalProfile
from fleetwatch.models.scores import Reason, Scores
from fleetwatch.models.tail import MIN_HISTORY, StreamTail, calibrated_surprise

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def check_profile_hyper(
    halflife_hours: float | None, buckets: int, period_hours: float, min_std: float
) -> None:
    if halflife_hours is not None and not halflife_hours > 0:
        raise HyperParameterError(f"halflife_hours must be > 0 or None, got {halflife_hours}")
    if buckets < 1 or not period_hours > 0:
        raise HyperParameterError(
            f"need buckets >= 1 and period_hours > 0, got {buckets}, {period_hours}"
        )
    if not min_std > 0:
        raise HyperParameterError(f"min_std must be > 0, got {min_std}")


def new_profile(halflife_hours: float | None, buckets: int, period_hours: float) -> SeasonalProfile:
    halflife_ms = None if halflife_hours is None else halflife_hours * HOUR_MS
    return SeasonalProfile(buckets, period_hours * HOUR_MS, halflife_ms)


EARLY_Z = 2.0 * ALERT_Z
"""The threshold of ``|z|`` while the stream's tail is unknown (under ``MIN_HISTORY`` values)."""


class Deviation(NamedTuple):
    """Per row of a batch, against its metric's profile and tail."""

    expected: FloatArray
    ok: BoolArray
    """Warm: the profile has enough readings to judge it."""
    surprise: FloatArray
    z: FloatArray
    """``|value - expected| / std`` (0 where not warm)."""
    band: FloatArray
    """Half-width of the normal range: the threshold in force times the standard deviation."""
    early: BoolArray | None = None
    """Judged against ``EARLY_Z``, its stream's tail still short (``None``: no row)."""


class SeasonalBaseline(Detector):
    kind: ClassVar[str] = "seasonal"

    def __init__(
        self,
        halflife_hours: float | None = 168.0,
        buckets: int = 24,
        period_hours: float = 24.0,
        warmup: int = 30,
        bucket_warmup: int = 20,
        min_std: float = 1e-3,
        false_alerts_per_day: float | None = 1.0,
        tail_halflife: float = 2000.0,
    ) -> None:
        check_profile_hyper(halflife_hours, buckets, period_hours, min_std)
        if false_alerts_per_day is not None and not false_alerts_per_day > 0:
            raise HyperParameterError(
                f"false_alerts_per_day must be > 0 or None, got {false_alerts_per_day}"
            )
        if not tail_halflife > 0:
            raise HyperParameterError(f"tail_halflife must be > 0, got {tail_halflife}")
        self.false_alerts_per_day = false_alerts_per_day
        self.tail_halflife = tail_halflife
        self.halflife_hours = halflife_hours
        self.buckets = buckets
        self.period_hours = period_hours
        self.warmup = warmup
        self.bucket_warmup = bucket_warmup
        self.min_std = min_std
        self.profile = new_profile(halflife_hours, buckets, period_hours)
        self.tails: list[StreamTail] = []
        """Per metric, its own history of ``|z|`` (:mod:`~fleetwatch.models.tail`)."""
        self.grid = Grid()
        """Per metric, the step its readings sit on (:mod:`~fleetwatch.models.grid`)."""

    def _learn(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> None:
        before = len(self.profile.metrics)
        judged = self._deviation(batch, judge=False) if before else None
        codes = self.profile.learn(batch, keep)
        k = len(self.profile.metrics)
        self.tails += [StreamTail(self.tail_halflife) for _ in range(k - before)]
        self.grid.learn_rows(codes, batch.value, k)
        early = np.ones(len(batch), bool) if judged is None else ~judged.ok
        # readings the profile was not warm for are measured against it as learned now (a first
        # batch, however long, leaves the tail a history to judge by)
        fresh = self._deviation(batch, judge=False) if early.any() else None
        for m, rows in per_metric_runs(codes, k):
            tail = self.tails[m]
            tail.observe(batch.event_ms[rows])
            if judged is not None and m < before:
                # every warm reading, |z| of 0 too; the body first (taking the batch's excursions
                # against the previous body instead: on/off streams 1.69 -> 2.03 alerts a day)
                warm = rows[judged.ok[rows]]
                cap = self._bar(tail, k)  # in force for the batch
                tail.summary.add(judged.z[warm[keep[warm]]])
                tail.excursions(judged.z[warm], cap)
            if fresh is not None:
                late = rows[early[rows] & fresh.ok[rows] & keep[rows]]
                tail.summary.add(fresh.z[late])

    def _deviation(self, batch: Batch, judge: bool = True) -> Deviation:
        """Per row: how it deviates from its profile, judged against its stream's tail (without
        ``judge``, the surprise is left at 0: learning needs ``ok`` and ``z`` alone)."""
        codes = batch.lookup(self.profile.metrics)
        mean, std, ok = self.profile.expect(
            codes, batch.event_ms, self.warmup, self.bucket_warmup, self.min_std
        )
        step = self.grid.per_row(codes)
        std = floor_std(std, step)
        deviation = shrink(batch.value - mean, step)
        z = np.where(ok, np.abs(deviation) / np.where(ok, std, 1.0), 0.0)
        band = ALERT_Z * std + 0.5 * step
        if not judge:
            return Deviation(mean, ok, np.zeros(len(batch)), z, band)
        if self.false_alerts_per_day is None:
            surprise = np.where(ok, normal_two_sided_surprise(z), 0.0)
            return Deviation(mean, ok, surprise, z, band)
        surprise = np.zeros(len(batch))
        k = len(self.profile.metrics)
        early = np.zeros(len(batch), bool)
        for m, rows in per_metric_runs(codes, k):
            tail = self.tails[m]
            if tail.summary.weight < MIN_HISTORY:  # its tail unknown yet
                bar = EARLY_Z
                early[rows] = True
            else:
                bar = self._bar(tail, k)
            judged = calibrated_surprise(tail, z[rows], bar, S_ALERT)
            surprise[rows] = np.where(ok[rows], judged, 0.0)
            band[rows] = bar * std[rows] + 0.5 * step[rows]
        return Deviation(mean, ok, surprise, z, band, early)

    def _bar(self, tail: StreamTail, streams: int) -> float:
        """The ``|z|`` at which the stream alerts (none without a budget or a history yet)."""
        budget = self.false_alerts_per_day
        if budget is None or tail.summary.weight < MIN_HISTORY:
            return math.inf
        return tail.threshold(budget, 1.0, streams, ALERT_Z)

    def _surprise(self, batch: Batch) -> FloatArray:
        return self._deviation(batch).surprise

    def _score(self, batch: Batch) -> Scores:
        d = self._deviation(batch)
        judged = (
            Reason.DEVIATION
            if d.early is None
            else np.where(d.early, Reason.EARLY, Reason.DEVIATION)
        )
        reason = np.where(d.ok, judged, Reason.WARMUP).astype(np.int8)
        names = np.asarray(batch.names, dtype=object)[batch.codes]
        return Scores.build(self.kind, d.surprise, names, batch.value, d.expected, d.band, reason)

    def learned_metrics(self) -> list[str]:
        return list(self.profile.metrics)

    def _state(self) -> dict[str, Any]:
        return {
            **self.profile.state(),
            "tails": [t.state() for t in self.tails],
            "grid": self.grid.state(),
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self.profile.load(state)
        k = len(self.profile.metrics)
        # parameters from before the stream's own tail start one empty
        tails = state.get("tails") or [StreamTail(self.tail_halflife).state()] * k
        self.tails = [StreamTail.load(self.tail_halflife, t) for t in tails]
        if len(self.tails) != k:
            raise ParamsError(f"seasonal state has {len(self.tails)} tails for {k} metrics")
        self.grid = Grid.load(state.get("grid"), k)
