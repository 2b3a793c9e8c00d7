"""The seasonal baseline: each metric against its own daily profile.

Per device and metric, time-decayed mean and variance per hour-of-day bucket (see
:class:`~fleetwatch.models.profile.SeasonalProfile`), interpolated between bucket centres. A
reading's statistic is ``z = (value - expected) / std`` and its surprise the two-sided normal
tail ``-ln P(|Z| >= |z|)``; a row alerts at ``|z|`` of about 4.9 (``p = 1e-6``).

Robustness comes from the exclusion policy of :mod:`base`: rows that alert (the scorer's flags,
or by default the detector's own pre-batch scores) are not learned, so a spike does not widen
the band and a long fault does not become the expected value.

Warm-up: no row of a metric is scored before ``warmup`` readings of it were learned; a bucket
is used once it has ``bucket_warmup`` readings, the metric's overall moments until then.

Hyperparameters: ``halflife_hours`` (memory of the moments in event time; ``None`` never
forgets), ``buckets`` per ``period_hours`` (1 disables seasonality), ``warmup``,
``bucket_warmup``, ``min_std`` (floor of the standard deviation, in the metric's units).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from fleetwatch.models import budget
from fleetwatch.models.base import Detector
from fleetwatch.models.batch import Batch, per_metric_runs
from fleetwatch.models.calibration import ALERT_Z, S_ALERT, normal_two_sided_surprise
from fleetwatch.models.errors import HyperParameterError
from fleetwatch.models.grid import Grid, floor_std, shrink
from fleetwatch.models.params import array, floats
from fleetwatch.models.profile import HOUR_MS, SeasonalProfile
from fleetwatch.models.scores import Reason, Scores

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
    ) -> None:
        check_profile_hyper(halflife_hours, buckets, period_hours, min_std)
        if false_alerts_per_day is not None and not false_alerts_per_day > 0:
            raise HyperParameterError(
                f"false_alerts_per_day must be > 0 or None, got {false_alerts_per_day}"
            )
        self.false_alerts_per_day = false_alerts_per_day
        self.halflife_hours = halflife_hours
        self.buckets = buckets
        self.period_hours = period_hours
        self.warmup = warmup
        self.bucket_warmup = bucket_warmup
        self.min_std = min_std
        self.profile = new_profile(halflife_hours, buckets, period_hours)
        self.spend = np.zeros((0, budget.WIDTH))
        """Per metric, its openings against the budget (:mod:`~fleetwatch.models.budget`)."""
        self.grid = Grid()
        """Per metric, the step its readings sit on (:mod:`~fleetwatch.models.grid`)."""

    def _learn(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> None:
        if self.false_alerts_per_day is not None and self.profile.metrics:
            surprise = self._deviation(batch)[3]
            codes = batch.lookup(self.profile.metrics)
            limit = budget.allowed(self.false_alerts_per_day, len(self.profile.metrics))
            for m, rows in per_metric_runs(codes, self.spend.shape[0]):
                on = surprise[rows] >= S_ALERT
                budget.record(self.spend, m, batch.event_ms[rows], on, limit)
        codes = self.profile.learn(batch, keep)
        k = len(self.profile.metrics)
        self.spend = budget.grow(self.spend, k)
        self.grid.learn_rows(codes, batch.value, k)

    def _deviation(self, batch: Batch) -> tuple[FloatArray, FloatArray, BoolArray, FloatArray]:
        """Per row: expected value, standard deviation, warm or not, and the surprise."""
        codes = batch.lookup(self.profile.metrics)
        mean, std, ok = self.profile.expect(
            codes, batch.event_ms, self.warmup, self.bucket_warmup, self.min_std
        )
        step = self.grid.per_row(codes)
        std = floor_std(std, step)
        deviation = shrink(batch.value - mean, step)
        z = np.where(ok, deviation / np.where(ok, std, 1.0), 0.0)
        surprise = np.maximum(np.where(ok, normal_two_sided_surprise(z), 0.0), 0.0)
        if self.false_alerts_per_day is not None and len(batch) and self.spend.shape[0]:
            limit = budget.allowed(self.false_alerts_per_day, len(self.profile.metrics))
            for m, rows in per_metric_runs(codes, self.spend.shape[0]):
                cut = budget.penalty(self.spend, m, int(batch.event_ms[rows[0]]), limit)
                if cut > 0:
                    surprise[rows] = np.maximum(surprise[rows] - cut, 0.0)
        return mean, std, ok, surprise

    def _surprise(self, batch: Batch) -> FloatArray:
        return self._deviation(batch)[3]

    def _score(self, batch: Batch) -> Scores:
        mean, std, ok, surprise = self._deviation(batch)
        reason = np.where(ok, Reason.DEVIATION, Reason.WARMUP).astype(np.int8)
        names = np.asarray(batch.names, dtype=object)[batch.codes]
        band = ALERT_Z * std + 0.5 * self.grid.per_row(batch.lookup(self.profile.metrics))
        return Scores.build(self.kind, surprise, names, batch.value, mean, band, reason)

    def learned_metrics(self) -> list[str]:
        return list(self.profile.metrics)

    def _state(self) -> dict[str, Any]:
        return {
            **self.profile.state(),
            "spend": floats(self.spend),
            "grid": self.grid.state(),
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self.profile.load(state)
        k = len(self.profile.metrics)
        # parameters from before the budget have no spend: nothing opened yet
        spent = state.get("spend")
        self.spend = (
            np.zeros((k, budget.WIDTH))
            if spent is None
            else array(state, "spend", (k, budget.WIDTH))
        )
        self.grid = Grid.load(state.get("grid"), k)
