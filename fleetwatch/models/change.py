"""The change detector: two-sided CUSUM on each metric's standardised residual.

A change must stand out against two references at once:

- the *profile*, a slow seasonal profile (the same machinery as the seasonal baseline, with a
  long half-life: by default 30 days): ``z_p = (value - expected) / std``;
- the *local* reference, a line through the metric's earlier readings weighted with a
  half-life of ``local_halflife`` readings (:mod:`trend`):
  ``z_l = (value - predicted) / s_l``, ``s_l`` the learned root mean square of that residual,
  or the line's recent one where that is larger (a machine that starts up and runs noisier
  than the parameters have seen yet is not a stream of small level shifts).

The upper sum adds ``min(z_p, z_l)``, the lower ``max(z_p, z_l)``: a reading counts as far as
both agree. Against the profile alone, a signal that moves on its own faster than the profile's
hour buckets resolve (a 10-30 minute load cycle, a steady discharge) leaves long runs of
same-signed residuals, which a CUSUM reads as a shift or a drift; against the local line alone,
a return from a fault to normal would look like a change. A level shift or a drift of the kind
the detector is for moves away from both. The price: a drift slow enough for the local line to
follow (a few noise deviations per half-life) is left to the seasonal detector, which flags it
once it leaves the profile's band.

Two cumulative sums (Page 1954) run through the device's readings in event time::

    S⁺ = max(0, S⁺ + z⁺ - drift)        S⁻ = max(0, S⁻ - z⁻ - drift)

with ``z⁺ = min(z_p, z_l)``, ``z⁻ = max(z_p, z_l)``. A level shift of ``δ`` standard deviations
adds ``δ - drift`` per reading while the local line has not absorbed it; a gradual drift starts
adding once it exceeds ``drift``. Calibration (Siegmund's approximation for a Gaussian CUSUM):
under no change ``P(S >= h) ≈ exp(-2·drift·h)``, so the surprise of ``S`` is ``2·drift·S - ln 2``
(two sides). A row alerts when that reaches the common alert level, i.e. at ``h ≈ 14.5`` for
``drift = 0.5``. With ``reset`` a side restarts from 0 after it alerts, so the detector re-arms
for the next change.

The sums are state: they are carried in the parameters and continued by the next batch, as are
the local line's weighted sums (the scorer keeps its own, newer ones, as it keeps the flat-line
detector's windows); the references learn only from rows not excluded (see :mod:`base`). Each
metric's recursion is solved with cumulative sums (Lindley's form ``S_t = C_t - min(-S_0,
min_{j<=t} C_j)``); with resets, once per alert, not once per row.

Incremental learning: the CUSUM sums after k mini-batches equal those of one batch; the
reference moments update after each batch, so the z of later mini-batches may differ slightly
from a single-batch pass (they agree to the reference's change over the batch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from fleetwatch.models import learned, trend
from fleetwatch.models.base import Readings, ScoringMemory
from fleetwatch.models.batch import Batch, per_metric_runs
from fleetwatch.models.calibration import S_ALERT
from fleetwatch.models.errors import require_positive
from fleetwatch.models.grid import Grid, floor_std, shrink
from fleetwatch.models.profile import ProfileDetector, decay_factor, row_weights
from fleetwatch.models.scores import Reason, Scores

FloatArray = npt.NDArray[np.float64]


def cusum(
    steps: FloatArray, start: float, limit: float, reset: bool
) -> tuple[FloatArray, npt.NDArray[np.bool_], float]:
    """One-sided CUSUM ``S_t = max(0, S_{t-1} + steps_t)`` from ``S_0 = start``.

    Returns the sums, the rows where a sum reached ``limit`` (after which it restarts from 0
    when ``reset``), and the sum to carry into the next batch."""
    if steps.size <= trend.SMALL:
        return _cusum_steps(steps, start, limit, reset)
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


def _cusum_steps(
    steps: FloatArray, start: float, limit: float, reset: bool
) -> tuple[FloatArray, npt.NDArray[np.bool_], float]:
    """:func:`cusum` one step at a time (a live batch's few rows: numpy costs more per call)."""
    sums: list[float] = []
    alarms: list[bool] = []
    total = start
    for step in steps.tolist():
        total += step
        if total < 0.0:
            total = 0.0
        alarm = total >= limit
        sums.append(total)
        alarms.append(alarm)
        if alarm and reset:
            total = 0.0
    end = sums[-1] if sums else 0.0
    if reset and alarms and alarms[-1]:
        end = 0.0
    return np.array(sums, dtype=np.float64), np.array(alarms, dtype=bool), end


@dataclass(eq=False, kw_only=True)
class ChangeDetector(ProfileDetector):
    kind: ClassVar[str] = "cusum"

    drift: float = 0.5
    reset: bool = True
    local_halflife: float = 30.0
    # the profile's, with this detector's defaults
    halflife_hours: float | None = 720.0
    warmup: int = 100

    # learned, a row per metric (not constructor arguments)
    upper: FloatArray = learned.per_metric()
    """Per metric, the upper CUSUM carried into the next batch."""
    lower: FloatArray = learned.per_metric()
    """Per metric, the lower CUSUM carried into the next batch."""
    # the local reference's: zeros from parameters without them (it starts learning)
    local: FloatArray = learned.per_metric(2, optional=True)
    """Per metric [W, Σw·r²] of the residual from the local reference."""
    local_counts: npt.NDArray[np.int64] = learned.per_metric(counts=True, optional=True)
    trends: FloatArray = learned.per_metric(trend.CARRY, optional=True)
    """Per metric, the local line's carried sums (:mod:`trend`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(self, "drift", "local_halflife")
        learned.start(self)
        self.grid = Grid()
        """Per metric, the step its readings sit on (:mod:`~fleetwatch.models.grid`)."""
        self._learned_trends = self.trends
        self._last_run: tuple[Batch, tuple[dict[str, FloatArray], FloatArray, FloatArray]] | None
        self._last_run = None
        self._last_local: tuple[Batch, int, tuple[FloatArray, FloatArray, FloatArray]] | None
        self._last_local = None

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
        mean, std, ok = self._expect(batch, codes)
        step = self.grid.per_row(codes)
        std = floor_std(std, step)
        z_p = np.where(ok, shrink(batch.value - mean, step) / np.where(ok, std, 1.0), 0.0)
        ref, scale, _ = self._local(batch, codes)
        scale = floor_std(scale, step)
        ok &= np.isfinite(ref) & np.isfinite(scale)
        z_l = np.where(ok, shrink(batch.value - ref, step) / np.where(ok, scale, 1.0), 0.0)
        n = len(batch)
        out = {name: np.zeros(n) for name in ("upper", "lower")}
        alarm = {name: np.zeros(n, bool) for name in ("upper", "lower")}
        upper, lower = self.upper.copy(), self.lower.copy()
        up_z, down_z = np.minimum(z_p, z_l), -np.maximum(z_p, z_l)
        for m, rows in per_metric_runs(codes, len(self.profile.metrics)):
            live = rows[ok[rows]]
            for name, z, carry in (("upper", up_z, upper), ("lower", down_z, lower)):
                sums, alarms, carry[m] = cusum(
                    z[live] - self.drift, float(carry[m]), self.limit, self.reset
                )
                out[name][live], alarm[name][live] = sums, alarms
        local_binds = np.abs(z_l) < np.abs(z_p)
        out.update(
            mean=np.where(local_binds, ref, mean),
            std=np.where(local_binds, scale, std),
            ok=ok.astype(np.float64),
        )
        return out, upper, lower

    def _local(
        self, batch: Batch, codes: npt.NDArray[np.intp]
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per row: the local line's prediction and the local scale (NaN while the metric is
        warming up); and the local line's sums after the batch, per metric. Kept for the batch:
        :meth:`learn` scores it with the same lines before it learns the metrics' new scales."""
        known = len(self.profile.metrics)
        memo = self._last_local
        if memo is not None and memo[0] is batch and memo[1] == known:
            return memo[2]
        n = len(batch)
        ref, scale = np.full(n, np.nan), np.full(n, np.nan)
        carries = self.trends.copy()
        for m, rows in per_metric_runs(codes, len(self.profile.metrics)):
            start = carries[m] if m < len(carries) else trend.empty()
            ref[rows], recent, after = trend.predict(batch.value[rows], start, self.local_halflife)
            if m < len(carries):
                carries[m] = after
            if m < self.local_counts.size and self.local_counts[m] >= self.warmup:
                w, sq = self.local[m]
                if w > 0:
                    learned = max(math.sqrt(sq / w), self.min_std)
                    scale[rows] = np.fmax(recent, learned)
        self._last_local = (batch, known, (ref, scale, carries))
        return ref, scale, carries

    def use_trends(self, held: Mapping[str, Any]) -> None:
        """Continue from the local lines the caller kept (metric → carried sums) instead of
        those in the parameters: the scorer's are newer than the trainer's last batch. A metric
        the caller holds none for starts from the parameters' own (not from an earlier call's)."""
        self.trends = self._learned_trends.copy()
        for i, metric in enumerate(self.profile.metrics):
            carry = held.get(metric)
            if carry is not None and len(carry) == trend.CARRY:
                self.trends[i] = carry
        self._last_run = self._last_local = None

    def trends_after(self, batch: Batch) -> dict[str, list[float]]:
        """Metric → the local line's sums after ``batch`` (to keep for :meth:`use_trends`)."""
        carries = self._local(batch, batch.lookup(self.profile.metrics))[2]
        present = set(batch.names)
        return {m: carries[i].tolist() for i, m in enumerate(self.profile.metrics) if m in present}

    def resume(self, memory: ScoringMemory) -> None:
        self.use_trends(memory.trends)

    def remember(self, readings: Readings, memory: ScoringMemory) -> None:
        memory.trends.update(self.trends_after(Batch.of(readings)))

    def _learn(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> None:
        if self.profile.metrics:
            _, self.upper, self.lower = self._run(batch)
        self._last_run = None
        before = self.profile.ref_ms
        codes = self.profile.learn(batch, keep)
        self.grid.learn_rows(codes, batch.value, len(self.profile.metrics))
        learned.grow(self, len(self.profile.metrics))
        to_ms = int(self.profile.ref_ms or 0)
        self.local *= decay_factor(before, to_ms, self.halflife_ms)
        ref, _, self.trends = self._local(batch, codes)
        self._learned_trends = self.trends.copy()
        self._last_local = None
        learn = keep & np.isfinite(ref)
        r = batch.value - ref
        for m, rows in per_metric_runs(codes, len(self.profile.metrics)):
            used = rows[learn[rows]]
            w = row_weights(batch.event_ms[used], to_ms, self.halflife_ms)
            self.local[m] += (w.sum(), (w * r[used] ** 2).sum())
            self.local_counts[m] += used.size

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
        return {
            **self.profile.state(),
            **learned.state(self),
            "grid": self.grid.state(),
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._last_run = self._last_local = None
        self.profile.load(state)
        k = len(self.profile.metrics)
        learned.load(self, state, k)
        self._learned_trends = self.trends.copy()
        self.grid = Grid.load(state.get("grid"), k)
