"""The change detector: two-sided CUSUM on each metric's standardised residual.

The reference is a slow seasonal profile (the same machinery as the seasonal baseline, with a
long half-life: by default 30 days). For each reading, ``z = (value - expected) / std`` and two
cumulative sums run through the device's readings in event time::

    S⁺ = max(0, S⁺ + z - drift)        S⁻ = max(0, S⁻ - z - drift)

A level shift of ``δ`` standard deviations adds ``δ - drift`` per reading; a gradual drift
starts adding once it exceeds ``drift``. Calibration (Siegmund's approximation for a Gaussian
CUSUM): under no change ``P(S >= h) ≈ exp(-2·drift·h)``, so the surprise of ``S`` is
``2·drift·S - ln 2`` (two sides). A row alerts when that reaches the common alert level, i.e. at
``h ≈ 14.5`` for ``drift = 0.5``: a 3-sigma shift is flagged after about 6 readings, a drift of
0.01 sigma per reading after about 100. With ``reset`` a side restarts from 0 after it alerts, so
the detector re-arms for the next change (a shift that persists alerts again every ``h/(δ -
drift)`` readings, until the trainer accepts the new level).

The sums are state: they are carried in the parameters and continued by the next batch, and the
reference learns only from rows not excluded (see :mod:`base`). Each metric's recursion is
solved with cumulative sums (Lindley's form ``S_t = C_t - min(-S_0, min_{j<=t} C_j)``); with
resets, once per alert, not once per row.

Incremental learning: the CUSUM sums after k mini-batches equal those of one batch; the
reference moments update after each batch, so the z of later mini-batches may differ slightly
from a single-batch pass (they agree to the reference's change over the batch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.models.base import Detector
from fleetwatch.models.batch import Batch, per_metric_runs
from fleetwatch.models.calibration import S_ALERT
from fleetwatch.models.params import array, floats
from fleetwatch.models.scores import Reason, Scores
from fleetwatch.models.seasonal import check_profile_hyper, new_profile

FloatArray = npt.NDArray[np.float64]


def cusum(
    steps: FloatArray, start: float, limit: float, reset: bool
) -> tuple[FloatArray, npt.NDArray[np.bool_], float]:
    """One-sided CUSUM ``S_t = max(0, S_{t-1} + steps_t)`` from ``S_0 = start``.

    Returns the sums, the rows where a sum reached ``limit`` (after which it restarts from 0
    when ``reset``), and the sum to carry into the next batch."""
    sums = np.empty_like(steps)
    alarms = np.zeros(steps.size, dtype=bool)
    begin, init = 0, start
    while begin < steps.size:
        c = np.cumsum(steps[begin:])
        run = c - np.minimum(np.minimum.accumulate(c), -init)
        sums[begin:] = run
        over = np.flatnonzero(run >= limit)
        if over.size == 0:
            break
        if not reset:
            alarms[begin + over] = True
            break
        alarms[begin + over[0]] = True
        begin, init = begin + int(over[0]) + 1, 0.0
    end = 0.0 if steps.size == 0 else float(sums[-1])
    if reset and steps.size and alarms[-1]:
        end = 0.0
    return sums, alarms, end


class ChangeDetector(Detector):
    kind: ClassVar[str] = "cusum"

    def __init__(
        self,
        drift: float = 0.5,
        reset: bool = True,
        halflife_hours: float | None = 720.0,
        buckets: int = 24,
        period_hours: float = 24.0,
        warmup: int = 100,
        bucket_warmup: int = 20,
        min_std: float = 1e-3,
    ) -> None:
        check_profile_hyper(halflife_hours, buckets, period_hours, min_std)
        if not drift > 0:
            raise ConfigurationError(f"drift must be > 0, got {drift}")
        self.drift = drift
        self.reset = reset
        self.halflife_hours = halflife_hours
        self.buckets = buckets
        self.period_hours = period_hours
        self.warmup = warmup
        self.bucket_warmup = bucket_warmup
        self.min_std = min_std
        self.profile = new_profile(halflife_hours, buckets, period_hours)
        self.upper = np.zeros(0)
        self.lower = np.zeros(0)
        self._last_run: tuple[Batch, tuple[dict[str, FloatArray], FloatArray, FloatArray]] | None
        self._last_run = None

    @property
    def limit(self) -> float:
        """The CUSUM value at which a row alerts."""
        return (S_ALERT + math.log(2.0)) / (2.0 * self.drift)

    def _run(self, batch: Batch) -> tuple[dict[str, FloatArray], FloatArray, FloatArray]:
        """Both sums through the batch: per-row arrays and the sums to carry per metric.

        The last result is kept until the state changes: :meth:`learn` gates a batch with the
        pre-batch scores and then carries the sums through the same batch, one run for both."""
        if self._last_run is not None and self._last_run[0] is batch:
            return self._last_run[1]
        run = self._run_sums(batch)
        self._last_run = (batch, run)
        return run

    def _run_sums(self, batch: Batch) -> tuple[dict[str, FloatArray], FloatArray, FloatArray]:
        codes = batch.lookup(self.profile.metrics)
        mean, std, ok = self.profile.expect(
            codes, batch.event_ms, self.warmup, self.bucket_warmup, self.min_std
        )
        z = np.where(ok, (batch.value - mean) / np.where(ok, std, 1.0), 0.0)
        n = len(batch)
        out = {name: np.zeros(n) for name in ("upper", "lower")}
        alarm = {name: np.zeros(n, bool) for name in ("upper", "lower")}
        upper, lower = self.upper.copy(), self.lower.copy()
        for m, rows in per_metric_runs(codes, len(self.profile.metrics)):
            live = rows[ok[rows]]
            for name, sign, carry in (("upper", 1.0, upper), ("lower", -1.0, lower)):
                sums, alarms, carry[m] = cusum(
                    sign * z[live] - self.drift, float(carry[m]), self.limit, self.reset
                )
                out[name][live], alarm[name][live] = sums, alarms
        out.update(mean=mean, std=std, ok=ok.astype(np.float64))
        return out, upper, lower

    def _learn(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> None:
        if self.profile.metrics:
            _, self.upper, self.lower = self._run(batch)
        self._last_run = None
        self.profile.learn(batch, keep)
        grow = len(self.profile.metrics) - self.upper.size
        self.upper = np.concatenate([self.upper, np.zeros(grow)])
        self.lower = np.concatenate([self.lower, np.zeros(grow)])

    def _surprise_of(self, run: dict[str, FloatArray]) -> FloatArray:
        stat = np.maximum(run["upper"], run["lower"])
        surprise: FloatArray = np.maximum(
            np.where(stat > 0, 2.0 * self.drift * stat - math.log(2.0), 0.0), 0.0
        )
        return surprise

    def _surprise(self, batch: Batch) -> FloatArray:
        return self._surprise_of(self._run(batch)[0])

    def _score(self, batch: Batch) -> Scores:
        run, _, _ = self._run(batch)
        up = run["upper"] >= run["lower"]
        surprise = self._surprise_of(run)
        reason = np.where(up, Reason.SHIFT_UP, Reason.SHIFT_DOWN)
        reason = np.where(run["ok"] > 0, reason, Reason.WARMUP).astype(np.int8)
        names = np.asarray(batch.names, dtype=object)[batch.codes]
        band = self.drift * run["std"]
        return Scores.build(self.kind, surprise, names, batch.value, run["mean"], band, reason)

    def _state(self) -> dict[str, Any]:
        return {**self.profile.state(), "upper": floats(self.upper), "lower": floats(self.lower)}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._last_run = None
        self.profile.load(state)
        k = len(self.profile.metrics)
        self.upper = array(state, "upper", (k,))
        self.lower = array(state, "lower", (k,))
