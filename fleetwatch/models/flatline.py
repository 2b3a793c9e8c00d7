"""Stuck sensors and dropouts: a metric that stops moving, a device that stops sending.

Flat line. Over each window of ``window`` consecutive readings of a metric the statistic is the
range ``r = max - min``; a window is a candidate only when its readings repeat one value, to
within the sensor's resolution (a quiet signal that still moves is not a stuck sensor: a machine
at rest reads lower noise than one running). The device's noise ``sigma`` is learned from first
differences (``E[d²] = 2 sigma²``, which ignores slow trends and the daily cycle). For ``k``
independent normal readings ``P(range <= r) ≈ √k · (r / (sigma·√(2π)))^(k-1)`` when ``r`` is
small. A sensor rounds to its resolution ``q`` (the smallest non-zero step ever learned), so
a window read with range ``r`` had a true range under ``r + q``, and its surprise is
``(k-1)·ln(sigma·√(2π) / (r + q)) - ½ ln k``. Since only windows within one step are
candidates, a window that repeats one value scores as a true range under one step, and one
that flickers between two neighbouring values as under two: a quantised sensor that
legitimately repeats a value is not a stuck one, and a constant series scores high but
finite. A sensor whose readings repeat exactly — a flow meter that sits on
32.0 and blips off it — is judged by how often it does: with a share ``p`` of its learned
first differences 0 (those at a rest value left out), a window of ``k`` repeats has
probability about ``p^(k-1)``, and its surprise is no more than ``-(k-1)·ln p`` (a sensor
repeating half its readings needs no alert for ten repeats, and no window of ten can tell it
stuck; a continuous one, ``p = 0``, keeps the normal bound).

Rest values. A value the metric sat on for whole windows among the readings learned (not
excluded: its device was in a normal state) — a stopped machine's 0 rpm — is where the metric
rests, not where it is stuck; so is a value it sat on for whole windows, left and came back to,
alerting or not: a stuck sensor does not leave its stuck value and return to it, a machine that
stops and starts again does, and its stops may all alert (held as a move the fleet knows, they
are excluded from learning) until its own members know them. Windows at one of its last
``max_rests`` rest values, seen at least ``rest_windows`` times among learned readings or left
once, score 0.

Dropout. Between consecutive event times of the device, a gap ``g`` against the learned typical
interval ``τ`` (time-decayed mean of the gaps, leaving out gaps over ``gap_factor·τ``) has
surprise ``S_ALERT · (g/τ - 1) / (gap_factor - 1)``: an exponential tail on the excess delay,
scaled so that a gap of exactly ``gap_factor·τ`` sits at the alert level. The score is carried
by the first reading after the gap. (A device that sends nothing at all is found by the
scorer's timers, not here: nothing arrives to be scored.)

State: noise sums, the weights of repeats, resolution, rest values, the last ``window - 1``
values per metric and the value its latest window sat on (so windows and runs continue across
batches) and the last event time. Learning in k mini-batches gives the same state as one batch
up to float rounding, except that the dropout gate (``gap_factor·τ``) uses ``τ`` as it was
before each batch, and a repeat is told at rest by the rest values as they were after its
batch.

Hyperparameters: ``window``, ``gap_factor``, ``halflife_hours``, ``warmup`` (differences and
gaps learned before scoring), ``max_rests``, ``rest_windows``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from fleetwatch.models import learned
from fleetwatch.models.base import ScoringMemory
from fleetwatch.models.batch import Batch, extend_metrics, per_metric_runs
from fleetwatch.models.calibration import S_ALERT
from fleetwatch.models.errors import HyperParameterError
from fleetwatch.models.params import array, floats
from fleetwatch.models.profile import DecayedDetector, advance, row_weights
from fleetwatch.models.scores import Reason, Scores
from fleetwatch.models.trend import SMALL

FloatArray = npt.NDArray[np.float64]
SQRT_2PI = math.sqrt(2.0 * math.pi)


@dataclass(eq=False, kw_only=True)
class FlatlineDetector(DecayedDetector):
    kind: ClassVar[str] = "flatline"

    window: int = 10
    gap_factor: float = 5.0
    warmup: int = 30
    max_rests: int = 4
    rest_windows: int = 5

    # learned, a row per metric (not constructor arguments)
    noise: FloatArray = learned.per_metric(2)
    """Per metric [W, Σw·d²] of first differences."""
    counts: npt.NDArray[np.int64] = learned.per_metric(counts=True)
    repeats: FloatArray = learned.per_metric(2, optional=True)
    """Per metric ``[W, Σw·(d = 0)]`` of its first differences away from its rest values
    (weights as in ``noise``); zeros from parameters without it: no bound on a window's surprise
    until it is learned."""
    resolution: FloatArray = learned.per_metric()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.window < 3:
            raise HyperParameterError(f"window must be >= 3 readings, got {self.window}")
        if not self.gap_factor > 1:
            raise HyperParameterError(f"gap_factor must be > 1, got {self.gap_factor}")
        self.metrics: list[str] = []
        learned.start(self)
        self.tails: list[list[float]] = []
        self.rests: list[list[list[float]]] = []
        """Per metric, ``[value, windows, left]`` of its rest values, the newest last: the
        learned windows that sat on the value, and how often a run of windows on it ended."""
        self.sitting: list[float | None] = []
        """Per metric, the value its latest window sat on (``None``: that window moved)."""
        self.gaps = np.zeros(2)
        """[W, Σw·gap] of gaps between event times."""
        self.gap_count = 0
        self.last_ms: int | None = None
        self.ref_ms: int | None = None

    @property
    def lookback(self) -> int:
        return self.window - 1

    @property
    def reports_dropouts(self) -> bool:
        return True

    def resume(self, memory: ScoringMemory) -> None:
        """Windows slide over the memory's latest values and the first gap is measured from its
        ``since_ms``, not from the trainer's copy as of its last batch."""
        self.last_ms = memory.since_ms
        self.tails = [list(memory.recent.get(m, ())) for m in self.metrics]

    @property
    def typical_interval_ms(self) -> float | None:
        if self.gap_count < self.warmup or self.gaps[0] <= 0:
            return None
        return float(self.gaps[1] / self.gaps[0])

    def _event_gaps(self, batch: Batch) -> tuple[Any, Any, FloatArray]:
        """Unique event times, each row's index into them, and the gap before each time."""
        times, inverse = batch.times()
        before = np.concatenate([[np.nan if self.last_ms is None else self.last_ms], times[:-1]])
        return times, inverse, (times - before).astype(np.float64)

    def _learn(self, batch: Batch, keep: npt.NDArray[np.bool_]) -> None:
        known = extend_metrics(self.metrics, batch)
        grow = len(known) - len(self.metrics)
        self.metrics = known
        learned.grow(self, len(known))
        self.tails += [[] for _ in range(grow)]
        self.rests += [[] for _ in range(grow)]
        self.sitting += [None] * grow
        to_ms, factor = advance(self.ref_ms, int(batch.event_ms[-1]), self.halflife_ms)
        self.noise *= factor
        self.repeats *= factor
        self.gaps *= factor
        self.ref_ms = to_ms
        codes = batch.lookup(known)
        for m, rows in per_metric_runs(codes, len(known)):
            tail = self.tails[m][-1:]
            values = np.concatenate([tail, batch.value[rows]])
            kept = np.concatenate([np.ones(len(tail), bool), keep[rows]])
            use = kept[1:] & kept[:-1]
            d = (values[1:] - values[:-1])[use]
            ends = batch.event_ms[rows][rows.size - use.size :]
            w = row_weights(ends[use], to_ms, self.halflife_ms)
            self.noise[m] += (w.sum(), (w * d * d).sum())
            self.counts[m] += d.size
            steps = np.abs(d[d != 0])
            if steps.size:
                low = float(steps.min())
                self.resolution[m] = (
                    low if self.resolution[m] == 0 else min(low, self.resolution[m])
                )
            self._learn_rests(m, batch.value[rows], keep[rows])
            self._learn_repeats(m, values[1:][use], d, w)
            self.tails[m] = (self.tails[m] + batch.value[rows].tolist())[-(self.window - 1) :]
        times, _, gap = self._event_gaps(batch)
        tau = self.typical_interval_ms
        use_gap = gap > 0  # NaN (no previous time) compares False
        if tau is not None:
            use_gap &= gap <= self.gap_factor * tau
        w = row_weights(times[use_gap], to_ms, self.halflife_ms)
        self.gaps += (w.sum(), (w * gap[use_gap]).sum())
        self.gap_count += int(use_gap.sum())
        self.last_ms = int(times[-1]) if self.last_ms is None else max(self.last_ms, int(times[-1]))

    def _learn_repeats(self, m: int, ends: FloatArray, d: FloatArray, w: FloatArray) -> None:
        """Count the first differences ``d`` (weights ``w``, ending on ``ends``) that are 0,
        leaving out those at a rest value: a machine stopped at 0 rpm repeats by the hour, which
        says nothing of how often it repeats a reading while it runs."""
        if d.size == 0:
            return
        if any(self._is_rest(rest) for rest in self.rests[m]):
            sd = math.sqrt(max(self.noise[m, 1] / self.noise[m, 0] / 2.0, 0.0))
            moving = ~self._at_rest(m, ends, self._repeat_floor(m, sd))
            w, d = w[moving], d[moving]
        self.repeats[m] += (float(w.sum()), float(w[d == 0].sum()))

    def _most_surprise(self, m: int) -> float:
        """The highest surprise a window of repeats of metric ``m`` can have: ``-(k-1)·ln p``
        with ``p`` the share of its first differences that are 0 (``inf`` for none)."""
        if m >= self.repeats.shape[0] or self.repeats[m, 0] <= 0 or self.repeats[m, 1] <= 0:
            return math.inf
        share = min(self.repeats[m, 1] / self.repeats[m, 0], 1.0)
        return -(self.window - 1) * math.log(share)

    def _repeat_floor(self, m: int, sd: float) -> float:
        """The range under which a window repeats one value: the sensor's resolution."""
        return max(float(self.resolution[m]), 1e-6 * sd)

    def _is_rest(self, rest: list[float]) -> bool:
        """Whether a ``[value, windows, left]`` entry is a rest value."""
        return rest[1] >= self.rest_windows or rest[2] >= 1

    def _note_rest(self, m: int, value: float, floor: float, windows: float, left: float) -> None:
        """Add ``windows`` learned windows and ``left`` ended runs to the rest entry of
        ``value`` (within ``floor``), making it the newest."""
        rests = self.rests[m]
        match = next((r for r in rests if abs(r[0] - value) <= floor), None)
        if match is None:
            rests.append([value, windows, left])
        else:
            rests.remove(match)
            rests.append([match[0], match[1] + windows, match[2] + left])

    def _learn_rests(self, m: int, values: FloatArray, keep: npt.NDArray[np.bool_]) -> None:
        """Count, by value, the learned windows that repeat one value and the runs of such
        windows (learned or not) that ended; note the value the latest window sits on."""
        k = self.window
        tail = self.tails[m][-(k - 1) :]
        series = np.concatenate([tail, values])
        if series.size < k:
            return
        sd = (
            math.sqrt(max(self.noise[m, 1] / self.noise[m, 0] / 2.0, 0.0))
            if self.noise[m, 0]
            else 0
        )
        floor = self._repeat_floor(m, sd)
        sitting = self.sitting[m]
        # a flat window needs k - 1 differences within the floor: most batches have none
        if np.count_nonzero(np.abs(series[1:] - series[:-1]) <= floor) < k - 1:
            if sitting is not None:  # the run the last batch ended on ends at its first window
                self._note_rest(m, sitting, floor, 0.0, 1.0)
                self.sitting[m] = None
                del self.rests[m][: max(0, len(self.rests[m]) - self.max_rests)]
            return
        kept = np.concatenate([np.ones(len(tail), bool), keep])
        windows = sliding_window_view(series, k)
        flat = windows.max(axis=1) - windows.min(axis=1) <= floor
        for value in windows[flat & sliding_window_view(kept, k).all(axis=1), -1].tolist():
            self._note_rest(m, value, floor, 1.0, 0.0)
        before = np.concatenate([[sitting is not None], flat[:-1]])
        ends = (before & ~flat).nonzero()[0].tolist()
        for i in ends:  # the run of flat windows up to window ``i - 1`` ended
            value = float(windows[i - 1, -1]) if i > 0 else sitting
            if value is not None:
                self._note_rest(m, value, floor, 0.0, 1.0)
        self.sitting[m] = float(windows[-1, -1]) if flat[-1] else None
        del self.rests[m][: max(0, len(self.rests[m]) - self.max_rests)]

    def _at_rest(self, m: int, values: FloatArray, floor: float) -> npt.NDArray[np.bool_]:
        """Per window (its last value), whether it sits on one of the metric's rest values."""
        out = np.zeros(values.size, bool)
        for rest in self.rests[m] if m < len(self.rests) else ():
            if self._is_rest(rest):
                out |= np.abs(values - rest[0]) <= floor
        return out

    def _flat(self, batch: Batch) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per row: surprise of its window's range, the range, and the metric's noise sigma."""
        n = len(batch)
        surprise, spread, sigma = np.zeros(n), np.full(n, np.nan), np.full(n, np.nan)
        out = (surprise, spread, sigma)
        codes = batch.lookup(self.metrics)
        k = self.window
        for m, rows in per_metric_runs(codes, len(self.metrics)):
            if self.counts[m] < self.warmup or self.noise[m, 0] <= 0:
                continue
            sd = math.sqrt(max(self.noise[m, 1] / self.noise[m, 0] / 2.0, 0.0))
            if sd == 0:
                continue
            floor = self._repeat_floor(m, sd)
            if rows.size <= SMALL and self._flat_steps(m, batch.value, rows, sd, floor, out):
                continue
            values = np.concatenate([self.tails[m], batch.value[rows]])
            if values.size < k:
                continue
            windows = _windows(values, k)
            r = windows.max(axis=1) - windows.min(axis=1)
            scored = rows[values.size - k + 1 - rows.size + np.arange(rows.size) >= 0]
            r = r[r.size - scored.size :]
            spread[scored], sigma[scored] = r, sd
            if not (r <= floor).any():  # no window repeats one value: no surprise to work out
                continue
            s = (k - 1) * np.log(sd * SQRT_2PI / (r + floor)) - 0.5 * math.log(k)
            s = np.minimum(s, self._most_surprise(m))
            repeat = (r <= floor) & ~self._at_rest(m, windows[-scored.size :, -1], floor)
            surprise[scored] = np.where(repeat, s, 0.0)
        return np.maximum(surprise, 0.0), spread, sigma

    def _flat_steps(
        self,
        m: int,
        value: FloatArray,
        rows: npt.NDArray[np.intp],
        sd: float,
        floor: float,
        out: tuple[FloatArray, FloatArray, FloatArray],
    ) -> bool:
        """:meth:`_flat` for one metric's few rows, window by window in plain floats (a live
        batch: numpy's per-call cost is most of the work). ``False``, nothing written, when a
        value is NaN (left to the array path)."""
        batch_values = value[rows].tolist()
        if any(v != v for v in batch_values):
            return False
        k = self.window
        values = [*self.tails[m], *batch_values]
        first = len(values) - len(batch_values)
        held = self.rests[m] if m < len(self.rests) else []
        rests = [rest[0] for rest in held if self._is_rest(rest)]
        tail = -0.5 * math.log(k)
        most = self._most_surprise(m)
        surprise, spread, sigma = out
        for j, row in enumerate(rows.tolist()):
            end = first + j + 1
            if end < k:
                continue
            window = values[end - k : end]
            r = max(window) - min(window)
            last = window[-1]
            repeat = r <= floor and not any(abs(last - v) <= floor for v in rests)
            s = (k - 1) * math.log(sd * SQRT_2PI / (r + floor)) + tail if repeat else 0.0
            s = min(s, most)
            surprise[row], spread[row], sigma[row] = s, r, sd
        return True

    def _dropout(self, batch: Batch) -> tuple[FloatArray, FloatArray]:
        """Per row: the surprise of the gap before its event time, and that gap."""
        _, inverse, gap = self._event_gaps(batch)
        tau = self.typical_interval_ms
        if tau is None:
            return np.zeros(len(batch)), gap[inverse]
        excess = (gap[inverse] / tau - 1.0) / (self.gap_factor - 1.0)
        return np.where(np.isnan(excess), 0.0, np.maximum(excess, 0.0) * S_ALERT), gap[inverse]

    def _surprise(self, batch: Batch) -> FloatArray:
        flat = self._flat(batch)[0]
        drop = self._dropout(batch)[0]
        surprise: FloatArray = np.maximum(np.where(drop > flat, drop, flat), 0.0)
        return surprise

    def _score(self, batch: Batch) -> Scores:
        flat, spread, sigma = self._flat(batch)
        drop, row_gap = self._dropout(batch)
        tau = self.typical_interval_ms
        is_drop = drop > flat
        names = np.asarray(batch.names, dtype=object)[batch.codes]
        tau_ms = np.nan if tau is None else tau
        return Scores.build(
            self.kind,
            np.where(is_drop, drop, flat),
            names,
            np.where(is_drop, row_gap, spread),
            np.where(is_drop, tau_ms, batch.value),
            np.where(is_drop, self.gap_factor * tau_ms, sigma),
            np.where(is_drop, Reason.DROPOUT, Reason.FLATLINE).astype(np.int8),
        )

    def learned_metrics(self) -> list[str]:
        return list(self.metrics)

    def _state(self) -> dict[str, Any]:
        return {
            "metrics": list(self.metrics),
            **learned.state(self),
            "tails": [floats(t) for t in self.tails],
            "rests": [[floats(r) for r in rests] for rests in self.rests],
            "sitting": list(self.sitting),
            "gaps": floats(self.gaps),
            "gap_count": self.gap_count,
            "last_ms": self.last_ms,
            "ref_ms": self.ref_ms,
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self.metrics = [str(m) for m in state["metrics"]]
        k = len(self.metrics)
        learned.load(self, state, k)
        self.tails = [[float(v) for v in t] for t in state["tails"]]
        rests = state.get("rests") or [[] for _ in range(k)]  # none before rest values existed
        # an entry without ``left`` (written before runs were counted) has seen none end
        self.rests = [[[float(x) for x in (*e, 0.0)[:3]] for e in r] for r in rests]
        sitting = state.get("sitting") or [None] * k
        self.sitting = [None if v is None else float(v) for v in sitting]
        self.gaps = array(state, "gaps", (2,))
        self.gap_count = int(state["gap_count"])
        self.last_ms = None if state["last_ms"] is None else int(state["last_ms"])
        self.ref_ms = None if state["ref_ms"] is None else int(state["ref_ms"])


def _windows(values: FloatArray, k: int) -> FloatArray:
    """``sliding_window_view(values, k)`` (``values`` at least ``k`` long): the same read-only
    view, made by one constructor call (the general function's checks cost more than a live
    batch's windows)."""
    series = np.ascontiguousarray(values)
    step = series.itemsize
    out: FloatArray = np.ndarray((series.size - k + 1, k), series.dtype, series, 0, (step, step))
    out.flags.writeable = False
    return out
