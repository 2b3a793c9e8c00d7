"""A stream's own tail: where a statistic is improbable relative to its history, not to a model.

A detector's statistic (a non-negative magnitude such as ``|z|``) is calibrated against the
values it took on the stream itself, not against the distribution a model says it should have:
real sensor noise has heavy tails, drifts, bursts and regimes that a Gaussian model would call a
one-in-a-million event many times a day. One mechanism for every detector that has a per-stream
statistic (the seasonal and level members), in ``fleetwatch detect``, the scorer and the
trainer's gate alike: its state is part of the detector's parameters.

The body is a histogram of the statistic on the stream's normal readings, on fixed bins
(``BIN_WIDTH`` wide up to ``LINEAR_TOP``, then geometric up to 32,768; larger values go in the
last bin), its counts decayed by half every ``halflife`` values added: bounded (``BINS``
floats), JSON-able and the same whatever the batching (up to float rounding of the decay). Its
``1 - P_BODY`` quantile is ``u``; above ``u`` the tail is a generalised Pareto distribution
fitted by probability-weighted moments, its shape kept within ``[0, MAX_SHAPE]`` (never lighter
than exponential, so a Gaussian statistic gets a conservative threshold; a Student-t one gets its
power law). :meth:`TailSummary.nats` gives ``-ln P(X >= x)``: the history's own share below
``u``, the fitted tail above, and so ranks rows over the whole range without a mass at the top.

What a budget of false alerts counts is *alerts*, not readings: :class:`StreamTail` also keeps
the peaks of the stream's excursions above ``u`` (every reading counts, alerting or not) and
sets the threshold where those peaks pass at the budget's rate (see there). A fault is one
excursion, so it adds one peak, once it is over: it cannot teach the stream that faults are
normal by lasting.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple, Self

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

BIN_WIDTH = 0.125
LINEAR_TOP = 8.0
"""Bins are ``BIN_WIDTH`` wide up to here, then each ``2^(1/GEOMETRIC_STEPS)`` times the last."""
GEOMETRIC_STEPS = 8
LINEAR_BINS = int(LINEAR_TOP / BIN_WIDTH)
BINS = LINEAR_BINS + 12 * GEOMETRIC_STEPS
"""Up to ``LINEAR_TOP · 2^12`` (32,768); larger values go in the last bin."""
P_BODY = 0.1
"""The tail above the ``1 - P_BODY`` quantile is the one extrapolated."""
_BODY_NATS = -math.log(P_BODY)
MIN_PEAKS = 20.0
"""The fewest values a generalised Pareto fit is trusted on: below this weight of excursion
peaks a threshold is taken from the body alone (from 30, the noise bench's on/off shape passed
its budget 2.5 times over: decision 0004)."""
MIN_HISTORY = MIN_PEAKS / P_BODY
"""Weight of history below which the history is not trusted (the floor is used): the body's
tail above its ``1 - P_BODY`` quantile then holds ``MIN_PEAKS`` values, the fewest a fit of it
is trusted on, as for the peaks (200)."""
MIN_BETA = BIN_WIDTH
FEW = 3.5
"""Less weight than this of highest peaks is a few that a fit may leave out."""
OUTLIER_ODDS = 0.01
"""A few highest peaks that the others' fit reaches with lower odds are left out of the fit."""
PEAK_MEMORY = 10.0
"""The excursion peaks are remembered this many times longer than the body."""
P_PEAKS = 0.25
"""The tail of the excursion peaks is fitted above their ``1 - P_PEAKS`` quantile."""
PASSING_ODDS = 20.0
"""A peak past the threshold in force is taken as it is up to where a passing reaches once in
this many under the stream's fitted tail, and at that level beyond (see ``excursions``)."""
MAX_SHAPE = 0.75
"""The heaviest tail extrapolated: a power law of index ``1 / MAX_SHAPE``."""
PRIOR_SHAPE = 0.25
"""The shape a fit of readings' own noise is drawn toward while it rests on few values: a
Student-t tail of 4 degrees of freedom, as real sensor noise commonly has (see
:func:`fit_excess`)."""
PRIOR_WEIGHT = 50.0
"""How many values above the fit's start the prior shape counts as, for a statistic of single
readings (the seasonal member's ``|z|``). An average's tail (the level member's) has none: the
average is lighter-tailed than its readings, and a heavy prior shape would lift its threshold
over the faults it is there to find."""
EDGES = np.concatenate(
    [
        np.arange(LINEAR_BINS) * BIN_WIDTH,
        LINEAR_TOP * 2.0 ** (np.arange(BINS - LINEAR_BINS + 1) / GEOMETRIC_STEPS),
    ]
)
"""The lower edge of each bin, and the upper edge of the last finite one."""
_CENTRES = np.concatenate(
    [
        EDGES[:LINEAR_BINS] + 0.5 * BIN_WIDTH,
        np.sqrt(EDGES[LINEAR_BINS:-1] * EDGES[LINEAR_BINS + 1 :]),
    ]
)
_EXCESS = [_CENTRES[k:] - EDGES[k] for k in range(BINS)]
"""Per bin ``k``, the excess over its lower edge of the centres of bins ``k`` and up."""
_OLD_BINS = 128
"""Summaries written before the geometric bins: 128 bins of ``BIN_WIDTH``."""


def bin_of(values: npt.ArrayLike) -> npt.NDArray[np.intp]:
    """The bin of each ``|value|``: the last whose lower edge it reaches (an infinity in the
    last bin)."""
    x = np.abs(np.asarray(values, dtype=np.float64))
    out: npt.NDArray[np.intp] = np.minimum(EDGES.searchsorted(x, side="right") - 1, BINS - 1)
    return out


_EDGE_LIST = EDGES.tolist()


def _bin(x: float) -> int:
    """:func:`bin_of` of one value."""
    return min(bisect.bisect_right(_EDGE_LIST, abs(x)) - 1, BINS - 1)


def _upgraded(counts: FloatArray) -> FloatArray:
    """Counts on today's bins from a summary written with 128 linear bins."""
    out = np.zeros(BINS)
    np.add.at(out, bin_of((np.arange(_OLD_BINS) + 0.5) * BIN_WIDTH), counts)
    return out


class Tail(NamedTuple):
    """The history's tail above its ``1 - P_BODY`` quantile ``u``: a generalised Pareto
    distribution of the excess over ``u`` with ``shape`` (0: exponential) and ``scale``."""

    u: float
    shape: float
    scale: float
    above: FloatArray
    """The history's share at or above each bin."""
    scale_exp: float = MIN_BETA
    """The mean excess over ``u``: the scale of an exponential tail, which the body-only
    threshold extrapolates (a short history's fitted shape, taken that far, overshoots)."""

    def nats_above(self, x: FloatArray) -> FloatArray:
        """``-ln P(X >= x) + ln P_BODY`` for ``x >= u``."""
        y = np.maximum(x - self.u, 0.0) / self.scale
        out: FloatArray = np.log1p(self.shape * y) / self.shape if self.shape > 0 else y
        return out


def excess(shape: float, scale: float, ratio: float) -> float:
    """The excess of a generalised Pareto distribution exceeded with probability ``1 / ratio``."""
    r = math.log(ratio)
    return scale * r if shape <= 0 else scale * math.expm1(shape * r) / shape


def excess_nats(shape: float, y: float) -> float:
    """``-ln P(Y >= y · scale)`` of a generalised Pareto excess ``Y``: the inverse of
    :func:`excess`, ``y`` in units of its scale."""
    return math.log1p(shape * y) / shape if shape > 0 else y


def fit_excess(counts: FloatArray, k: int, prior: float = 0.0) -> tuple[float, float]:
    """``(shape, scale)`` of the excess over ``EDGES[k]`` of the binned values in bins ``k`` and
    up, by probability-weighted moments (Hosking and Wallis 1987): ``a0 = E[Y]``,
    ``a1 = E[Y (1 - F(Y))]``, ``shape = (r - 2) / (r - 1)`` with ``r = a0 / (2 a1)``,
    ``scale = a0 (1 - shape)``; the shape is kept within ``[0, MAX_SHAPE]`` (never lighter than
    exponential) and drawn toward ``PRIOR_SHAPE`` as if ``prior`` values had that shape.

    Why the prior: the moments of a few dozen values rarely show a heavy tail's shape, and the
    threshold extrapolates it to a budget of one false alert a day, some 10^5 readings out at
    1 Hz. Without the prior a young heavy-tailed (Student-t) stream fits a light tail and alerts
    many times its budget; with it, a young Gaussian stream's threshold starts higher than its
    noise needs and comes down as its history grows: the alerts it gives up in its first hours
    are those under a few times the noise."""
    shape, scale, _ = _moments(counts, k, prior)
    return shape, scale


def _moments(counts: FloatArray, k: int, prior: float) -> tuple[float, float, float]:
    """:func:`fit_excess` and the mean excess ``a0``."""
    w = counts[k:]
    cum = w.cumsum()
    weight = float(cum[-1]) if cum.size else 0.0
    if weight <= 0:
        return 0.0, MIN_BETA, MIN_BETA
    y = _EXCESS[k]
    a0 = float(np.dot(w, y)) / weight
    a1 = a0 - float(np.dot(w * y, cum - 0.5 * w)) / weight**2
    r = a0 / (2.0 * a1) if a1 > 0 else 2.0
    fitted = min(max((r - 2.0) / (r - 1.0), 0.0), MAX_SHAPE) if r > 2.0 else 0.0
    shape = (weight * fitted + prior * PRIOR_SHAPE) / (weight + prior)
    return shape, max(a0 * (1.0 - shape), MIN_BETA), max(a0, MIN_BETA)


def fit_tail(counts: FloatArray, prior: float = 0.0) -> Tail:
    """``u``, the ``1 - P_BODY`` quantile of the history, and the tail of the excess over it."""
    above = counts[::-1].cumsum()[::-1]  # weight at or above each bin
    total = float(above[0])
    k = int((above >= P_BODY * total).nonzero()[0][-1])
    shape, scale, mean = _moments(counts, k, prior)
    return Tail(float(EDGES[k]), shape, scale, above / total, mean)


class TailSummary:
    """The decayed histogram of one stream's statistic."""

    def __init__(
        self, halflife: float, counts: Sequence[float] | None = None, prior: float = 0.0
    ) -> None:
        self.halflife = halflife
        self.prior = prior
        """The weight of ``PRIOR_SHAPE`` in the fitted tail (:func:`fit_excess`)."""
        self.counts: FloatArray = (
            np.zeros(BINS) if counts is None else np.asarray(counts, dtype=np.float64)
        )
        if self.counts.shape == (_OLD_BINS,):
            self.counts = _upgraded(self.counts)
        if self.counts.shape != (BINS,):
            raise ValueError(f"a tail summary has {BINS} bins, got {self.counts.shape}")
        self._memo: Tail | None = None
        """The fitted tail, until the next :meth:`add`."""
        self._weight = float(self.counts.sum())
        self.version = 0
        """Counts the changes: what was derived from the summary is good until it moves."""

    @property
    def weight(self) -> float:
        return self._weight

    def add(self, values: FloatArray) -> None:
        """Take in ``values`` (the statistic on readings judged normal), decaying the past."""
        if values.size == 0:
            return
        self._memo = None
        self.version += 1
        self.counts *= 2.0 ** (-values.size / self.halflife)
        self.counts += np.bincount(bin_of(values), minlength=BINS)
        self._weight = float(self.counts.sum())

    def tail(self) -> Tail:
        if self._memo is None:
            self._memo = fit_tail(self.counts, self.prior)
        return self._memo

    def threshold(self, p: float, floor: float, fitted: bool = False) -> float:
        """The value exceeded with probability ``p`` per reading, not below ``floor``: under the
        body's exponential tail, or with ``fitted``, its tail of the shape fitted above ``u``
        (a generalised Pareto distribution of that shape and the same mean excess)."""
        if self.weight < MIN_HISTORY:
            return floor
        tail = self.tail()
        shape = tail.shape if fitted else 0.0
        return max(floor, tail.u + excess(shape, tail.scale_exp * (1.0 - shape), P_BODY / p))

    def nats(self, values: FloatArray) -> FloatArray:
        """``-ln P(X >= x)``: the history's own share at or above ``x`` below ``u``, the
        fitted tail above it; without enough history, ``x`` itself (a placeholder that only
        keeps the order)."""
        x = np.abs(np.asarray(values, dtype=np.float64))
        if self._weight < MIN_HISTORY:
            return x
        tail = self.tail()
        body = np.minimum(-np.log(np.maximum(tail.above[bin_of(x)], P_BODY)), _BODY_NATS)
        out: FloatArray = np.where(x < tail.u, body, _BODY_NATS + tail.nats_above(x))
        return out

    def nats_of(self, x: float) -> float:
        """:meth:`nats` of one value."""
        x = abs(x)
        if self._weight < MIN_HISTORY:
            return x
        tail = self.tail()
        if x >= tail.u:
            y = (x - tail.u) / tail.scale
            return _BODY_NATS + excess_nats(tail.shape, y)
        share = float(tail.above[_bin(x)])
        return min(-math.log(max(share, P_BODY)), _BODY_NATS)


DAY_MS = 86_400_000.0


class StreamTail:
    """One stream's calibration: the tail of its statistic, its excursions and how often it
    reads.

    An *excursion* is a run of consecutive readings whose statistic is at or above the body's ``u``
    (every reading counts, alerting or not); once it ends, its peak goes into a histogram decayed
    per reading, remembered ``PEAK_MEMORY`` times longer than the body. A false alert is an
    excursion whose peak passes the threshold, so the threshold for a budget of false alerts a day
    is the level that the stream's excursion peaks pass at that rate: ``u`` plus the generalised
    Pareto quantile of the peaks' excess, at the budget's share of the excursions. Counting
    excursions, not readings, is what makes the rate hold whatever the stream's shape: an average
    that stays up for one reading or for fifty after a heavy-tailed spike is one excursion, and a
    long fault adds one peak to the history, once it is over, whatever its length.

    Until ``MIN_PEAKS`` excursions were seen, the threshold is the body's quantile at the
    per-reading ``p(budget, span, streams)`` (one excursion taken to last ``span`` readings).
    For a statistic of single readings (``span`` 1: the seasonal member's ``|z|``) the body's
    tail is extrapolated with the shape fitted to it, since such a statistic has the noise's own
    tail: judged by an exponential tail, a young stream of heavy-tailed readings (a vibration,
    Student-t) would alert on its own shocks. An average's tail (longer ``span``) is
    extrapolated exponentially: over a short history its fitted shape, taken that far,
    overshoots and hides faults. Nothing is counted before the body has ``MIN_HISTORY`` values.

    ``prior``: the weight of ``PRIOR_SHAPE`` in every fit of the stream's tail, its body's and its
    peaks' (``PRIOR_WEIGHT`` for a statistic of single readings; see :func:`fit_excess`)."""

    def __init__(self, halflife: float, prior: float = 0.0) -> None:
        self.prior = prior
        self.summary = TailSummary(halflife, prior=prior)
        self.peaks: FloatArray = np.zeros(BINS)
        """Decayed histogram of the peaks of ended excursions."""
        self.readings = 0.0
        """Decayed count of the readings the excursions were taken from."""
        self.peak = 0.0
        """The peak so far of the excursion still going on (0: none)."""
        self.interval_ms = 0.0
        self.last_ms: int | None = None
        self.changes = 0
        """Counts what moved the excursions: a threshold is good until it moves."""
        self._thresholds: dict[tuple[object, ...], float] = {}
        """Thresholds asked for since the stream last changed, by their arguments."""

    def observe(self, event_ms: npt.NDArray[np.int64]) -> None:
        """Learn the typical interval between the stream's readings (time-decayed mean)."""
        if event_ms.size == 0:
            return
        before = self.last_ms
        times = event_ms if before is None else np.concatenate([[before], event_ms])
        gaps = (times[1:] - times[:-1]).astype(np.float64)
        gaps = gaps[gaps > 0]
        if gaps.size:
            w = 2.0 ** (-gaps.size / self.summary.halflife)
            mean = float(np.add.reduce(gaps)) / gaps.size  # ``gaps.mean()``, without its wrapper
            self.interval_ms = (
                mean if self.interval_ms <= 0 else w * self.interval_ms + (1 - w) * mean
            )
        self.last_ms = int(event_ms[-1]) if before is None else max(before, int(event_ms[-1]))

    def excursions(self, values: FloatArray, cap: float = math.inf) -> None:
        """Take in the statistic on the stream's next readings, in order, all of them. An
        excursion that passed ``cap`` (the threshold in force) counts as one passing of it: its
        peak is taken as it is up to the level a passing reaches once in ``PASSING_ODDS`` under
        the stream's own fitted tail, and at that level beyond. A fault's peak, far past what
        the noise reaches, would otherwise set the fitted tail of a stream with few peaks and
        blind it to faults of its size for as long as peaks are remembered."""
        n = values.size
        if n == 0 or self.summary.weight < MIN_HISTORY:
            return
        self.changes += 1
        keep = 2.0 ** (-1.0 / (PEAK_MEMORY * self.summary.halflife))
        fade = keep**n
        self.peaks *= fade
        self.readings = self.readings * fade + (1.0 - fade) / (1.0 - keep)
        x = np.minimum(np.abs(values), EDGES[-1])  # finite, whatever the statistic
        u = self.summary.tail().u
        up = x >= u if u > 0 else x > 0  # above a body all at 0, anything is
        if self.peak <= 0 and not up.any():
            return
        flags = np.empty(n + 2, dtype=np.int8)
        flags[0], flags[-1] = self.peak > 0, 0
        flags[1:-1] = up
        step = flags[1:] - flags[:-1]
        starts = (step == 1).nonzero()[0].tolist()
        ends = (step == -1).nonzero()[0].tolist()
        carried = self.peak
        if carried > 0:
            starts.insert(0, 0)
        self.peak = 0.0
        values_of = x.tolist()  # a run holds no NaN (``up`` is false there): max() is numpy's
        for lo, hi in zip(starts, ends, strict=True):
            top = max(max(values_of[lo:hi]) if hi > lo else 0.0, carried if lo == 0 else 0.0)
            if hi == n:
                self.peak = top
            else:  # ended before reading ``hi``: weighed as of then
                if top > cap:  # a passing: no further than the stream's own tail expects
                    top = min(top, self._passing(cap))
                self.peaks[_bin(top)] += keep ** (n - 1 - hi)

    def _passing(self, cap: float) -> float:
        """The level an excursion past ``cap`` passes once in ``PASSING_ODDS`` under the tail
        the stream has fitted: of its excursion peaks once it knows them, else of its body (past
        ``cap``, a generalised Pareto excess of shape ``ξ`` and scale ``s`` over ``v`` is one of
        the same shape and scale ``s + ξ (cap - v)``)."""
        if self.knows_excursions():
            level, shape, scale = self._peaks_tail()
        else:
            tail = self.summary.tail()
            level, shape, scale = tail.u, tail.shape, tail.scale
        return cap + excess(shape, scale + shape * max(cap - level, 0.0), PASSING_ODDS)

    def _peaks_tail(self) -> tuple[float, float, float]:
        """Where the fit of the excursion peaks starts (the upper ``P_PEAKS`` of the peaks above
        ``u``, at least ``MIN_PEAKS``: the tail's shape shows far out), and its shape and scale."""
        k = _bin(self.summary.tail().u)
        above = self.peaks[::-1].cumsum()[::-1]
        seen = float(above[k])
        top = max(k, int((above >= max(P_PEAKS * seen, MIN_PEAKS)).nonzero()[0][-1]))
        shape, scale = fit_excess(self.peaks, top, self.prior)
        shape, scale = self._without_outlier(top, float(above[top]), shape, scale)
        return float(EDGES[top]), shape, scale

    def _without_outlier(
        self, top: int, n: float, shape: float, scale: float
    ) -> tuple[float, float]:
        """The fit above bin ``top`` (``n`` peaks, fitted ``shape`` and ``scale``) without its
        highest few peaks (under ``FEW`` of them) where the fit of the others gives odds under
        ``OUTLIER_ODDS`` that the highest of ``n`` peaks reaches the lowest of those left out
        (the most left out that are): with them, as it was.

        Why: a shape fitted from a few dozen peaks is extrapolated some 10^4 times further than
        they reach, and one peak far beyond the rest sets it. A stream whose peaks lie within a
        few deviations but for one past its young threshold (a fault, counted as a passing: see
        ``excursions``) would fit a heavy shape and a threshold many times above the faults it
        should find; two or three such peaks are as often two faults as a heavy tail. They are
        left out at any age, and without their weight; the rate of peaks past the fit's start
        still counts them (see ``_threshold``). A heavy tail's own far peaks are kept: the
        others' fit reaches them, and more than a few of them are the tail."""
        occupied = (self.peaks > 0.0).nonzero()[0]  # a faded peak counts by its faded weight
        occupied = occupied[occupied > top]
        best = (shape, scale)
        rest = self.peaks.copy()
        left_out = 0.0
        for m in range(1, occupied.size):  # the highest ``m`` bins
            lowest = occupied[-m]
            left_out += self.peaks[lowest]
            if left_out >= FEW:
                break
            rest[lowest] = 0.0
            r_shape, r_scale = fit_excess(rest, top, self.prior)
            y = (_CENTRES[lowest] - EDGES[top]) / r_scale
            reached = -math.expm1(n * math.log1p(-math.exp(-excess_nats(r_shape, y))))
            if reached < OUTLIER_ODDS:  # the others' fit hardly reaches the lowest left out
                best = (r_shape, r_scale)
        return best

    def knows_excursions(self) -> bool:
        """Whether ``MIN_PEAKS`` excursions were seen: the threshold is then where their peaks
        pass at the budget's rate, not the body's extrapolation."""
        if self.summary.weight < MIN_HISTORY or self.readings <= 0:
            return False
        return float(self.peaks[_bin(self.summary.tail().u) :].sum()) >= MIN_PEAKS

    def excursions_seen(self) -> float:
        """The decayed count of ended excursions above the body's ``u``."""
        if self.summary.weight < MIN_HISTORY:
            return 0.0
        return float(self.peaks[_bin(self.summary.tail().u) :].sum())

    def p(self, budget: float, span: float, streams: int) -> float:
        """The per-reading probability that spends ``budget`` over the day's readings, an
        excursion lasting ``span`` readings, shared by ``streams`` streams."""
        return min(0.05, budget / (max(self._per_day() / span, 1.0) * max(streams, 1)))

    def threshold(self, budget: float, span: float, streams: int, floor: float) -> float:
        """The level that false alerts pass ``budget`` times a day, shared by ``streams``
        streams; never below ``floor``."""
        key = (budget, span, streams, floor, self.summary.version, self.changes, self.interval_ms)
        known = self._thresholds.get(key)
        if known is None:
            if len(self._thresholds) > 8:
                self._thresholds.clear()
            known = self._thresholds[key] = self._threshold(budget, span, streams, floor)
        return known

    def _threshold(self, budget: float, span: float, streams: int, floor: float) -> float:
        summary = self.summary
        if summary.weight < MIN_HISTORY:
            return floor
        u = summary.tail().u
        seen = float(self.peaks[_bin(u) :].sum())
        if self.readings <= 0 or not seen >= MIN_PEAKS:  # it does not know its excursions
            # a statistic of single readings keeps the noise's own tail: extrapolate its shape
            return summary.threshold(self.p(budget, span, streams), floor, span <= 1.0)
        rate = seen / self.readings
        allowed = budget / (self._per_day() * max(streams, 1))
        if allowed >= rate:
            return max(floor, u)
        level, shape, scale = self._peaks_tail()
        rate *= float(self.peaks[_bin(level) :].sum()) / seen
        if allowed >= rate:
            return max(floor, level)
        return max(floor, level + excess(shape, scale, rate / allowed))

    def _per_day(self) -> float:
        return DAY_MS / self.interval_ms if self.interval_ms > 0 else DAY_MS / 1000.0

    def state(self) -> dict[str, object]:
        return {
            "counts": self.summary.counts.tolist(),
            "peaks": self.peaks.tolist(),
            "readings": self.readings,
            "peak": self.peak,
            "interval_ms": self.interval_ms,
            "last_ms": self.last_ms,
        }

    @classmethod
    def load(cls, halflife: float, state: dict[str, object], prior: float = 0.0) -> Self:
        """From :meth:`state`; a state written before excursions were counted has none yet."""
        out = cls(halflife, prior)
        out.summary = TailSummary(halflife, state["counts"], prior)  # type: ignore[arg-type]
        if "peaks" in state:
            out.peaks = TailSummary(halflife, state["peaks"]).counts  # type: ignore[arg-type]
            out.readings = float(state["readings"])  # type: ignore[arg-type]
            out.peak = float(state["peak"])  # type: ignore[arg-type]
        out.interval_ms = float(state["interval_ms"])  # type: ignore[arg-type]
        last = state["last_ms"]
        out.last_ms = None if last is None else int(last)  # type: ignore[call-overload]
        return out


def calibrated_surprise(
    tail: StreamTail, z: FloatArray, bar: FloatArray | float, s_alert: float
) -> FloatArray:
    """``|z|`` as a surprise on the common scale: the stream's own ``-ln P(X >= |z|)`` scaled
    so that ``bar`` (the threshold in force, per row or for all) maps to ``s_alert``."""
    if isinstance(bar, float):
        at_bar: float | FloatArray = max(tail.summary.nats_of(bar), 1e-9)
    else:
        at_bar = np.maximum(tail.summary.nats(bar), 1e-9)
    out: FloatArray = tail.summary.nats(z) * (s_alert / at_bar)
    return out


def tails_in_force(
    metrics: Sequence[str],
    tails: Sequence[StreamTail],
    threshold: Callable[[StreamTail, int], float],
) -> list[tuple[str, StreamTail, float]]:
    """Per metric, its own tail and the ``threshold`` that tail sets in force, the budget
    shared by all ``metrics``: what a detector's ``own_tails`` gives the fleet's pool."""
    streams = len(metrics)
    return [
        (name, tail, threshold(tail, streams)) for name, tail in zip(metrics, tails, strict=True)
    ]
