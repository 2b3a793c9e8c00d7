"""A stream's own tail: where a statistic is improbable relative to its history, not to a model.

A detector's statistic (a non-negative magnitude such as ``|z|``) is calibrated against the
values it took on the stream's normal readings, not against the distribution a model says it
should have: real sensor noise has heavy tails, drifts and steps that a Gaussian model would
call a one-in-a-million event many times a day.

The summary is a histogram of the statistic on fixed bins (``BIN_WIDTH`` wide up to ``TOP``;
larger values go in the last bin), its counts decayed by half every ``halflife`` values added:
bounded (``BINS`` floats), mergeable, JSON-able and the same whatever the batching (up to float
rounding of the decay). Above the ``1 - P_BODY`` quantile ``u`` of the history the tail is taken
as exponential (peaks over a threshold, the generalised Pareto tail with shape 0), with the
mean excess ``beta`` over ``u`` as its scale::

    P(X >= x) ≈ P_BODY · exp(-(x - u) / beta)        for x >= u

An exponential tail is heavier than a Gaussian one, so for a Gaussian statistic the threshold
is conservative; a statistic with heavier tails (drift, bursts) gets a larger ``beta`` and so a
higher threshold. For a per-row false-alert probability ``p`` the threshold is
``u + beta · ln(P_BODY / p)``, never below the detector's floor; until ``MIN_HISTORY`` values
were seen it is the floor. :meth:`TailSummary.nats` gives ``-ln P(X >= x)``: the history's own
share below ``u``, the exponential tail above. :class:`StreamTail` adds the stream's reading
interval, from which a budget of false alerts a day becomes a per-reading ``p``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

BIN_WIDTH = 0.125
TOP = 16.0
BINS = int(TOP / BIN_WIDTH)
P_BODY = 0.1
"""The tail above the ``1 - P_BODY`` quantile is the one extrapolated."""
MIN_HISTORY = 200.0
"""Weight of history below which the history is not trusted (the floor is used)."""
MIN_BETA = BIN_WIDTH
_CENTRES = (np.arange(BINS) + 0.5) * BIN_WIDTH


class TailSummary:
    """The decayed histogram of one stream's statistic."""

    def __init__(self, halflife: float, counts: Sequence[float] | None = None) -> None:
        self.halflife = halflife
        self.counts: FloatArray = (
            np.zeros(BINS) if counts is None else np.asarray(counts, dtype=np.float64)
        )
        if self.counts.shape != (BINS,):
            raise ValueError(f"a tail summary has {BINS} bins, got {self.counts.shape}")
        self._memo: tuple[float, float, FloatArray] | None = None
        """``(u, beta, share at or above each bin)``, until the next :meth:`add`."""

    @property
    def weight(self) -> float:
        return float(self.counts.sum())

    def add(self, values: FloatArray) -> None:
        """Take in ``values`` (the statistic on readings judged normal), decaying the past."""
        if values.size == 0:
            return
        self._memo = None
        self.counts *= 2.0 ** (-values.size / self.halflife)
        bins = np.minimum((np.abs(values) / BIN_WIDTH).astype(np.intp), BINS - 1)
        self.counts += np.bincount(bins, minlength=BINS)

    def body_and_scale(self) -> tuple[float, float]:
        """``(u, beta)``: the ``1 - P_BODY`` quantile and the mean excess above it."""
        return self._derived()[:2]

    def _derived(self) -> tuple[float, float, FloatArray]:
        if self._memo is None:
            total = self.weight
            above = np.cumsum(self.counts[::-1])[::-1]  # weight at or above each bin
            k = int(np.flatnonzero(above >= P_BODY * total)[-1])
            u = float(k * BIN_WIDTH)
            w = self.counts[k:]
            beta = float(np.dot(w, _CENTRES[k:] - u) / w.sum()) if w.sum() > 0 else MIN_BETA
            self._memo = (u, max(beta, MIN_BETA), above / total)
        return self._memo

    def threshold(self, p: float, floor: float) -> float:
        """The value exceeded with probability ``p`` per reading, not below ``floor``."""
        if self.weight < MIN_HISTORY:
            return floor
        u, beta = self.body_and_scale()
        return max(floor, u + beta * math.log(P_BODY / p))

    def nats(self, values: FloatArray) -> FloatArray:
        """``-ln P(X >= x)``: the history's own share at or above ``x`` below ``u``, the
        exponential tail above it; without enough history, ``x`` itself (a placeholder that
        only keeps the order)."""
        x = np.abs(np.asarray(values, dtype=np.float64))
        if self.weight < MIN_HISTORY:
            return x
        u, beta, above = self._derived()
        bins = np.minimum((x / BIN_WIDTH).astype(np.intp), BINS - 1)
        body = -np.log(np.maximum(above[bins], P_BODY))
        out: FloatArray = np.where(x < u, np.minimum(body, -math.log(P_BODY)), 0.0)
        out = np.where(x >= u, -math.log(P_BODY) + (x - u) / beta, out)
        return out


DAY_MS = 86_400_000.0


class StreamTail:
    """One stream's calibration: the tail of its statistic and how often it reads.

    ``p(budget, span, streams)`` is the per-reading probability at which a stream of a device of
    ``streams`` streams spends ``budget`` false alerts a day, when one excursion of the statistic
    lasts about ``span`` readings (1 for a statistic of one reading)."""

    def __init__(self, halflife: float) -> None:
        self.summary = TailSummary(halflife)
        self.interval_ms = 0.0
        self.last_ms: int | None = None

    def observe(self, event_ms: npt.NDArray[np.int64]) -> None:
        """Learn the typical interval between the stream's readings (time-decayed mean)."""
        if event_ms.size == 0:
            return
        before = self.last_ms
        times = event_ms if before is None else np.concatenate([[before], event_ms])
        gaps = np.diff(times).astype(np.float64)
        gaps = gaps[gaps > 0]
        if gaps.size:
            w = 2.0 ** (-gaps.size / self.summary.halflife)
            mean = float(gaps.mean())
            self.interval_ms = (
                mean if self.interval_ms <= 0 else w * self.interval_ms + (1 - w) * mean
            )
        self.last_ms = int(event_ms[-1]) if before is None else max(before, int(event_ms[-1]))

    def p(self, budget: float, span: float, streams: int) -> float:
        per_day = DAY_MS / self.interval_ms if self.interval_ms > 0 else DAY_MS / 1000.0
        return min(0.05, budget / (max(per_day / span, 1.0) * max(streams, 1)))

    def state(self) -> dict[str, object]:
        return {
            "counts": [float(c) for c in self.summary.counts],
            "interval_ms": self.interval_ms,
            "last_ms": self.last_ms,
        }

    @classmethod
    def load(cls, halflife: float, state: dict[str, object]) -> StreamTail:
        out = cls(halflife)
        out.summary = TailSummary(halflife, state["counts"])  # type: ignore[arg-type]
        out.interval_ms = float(state["interval_ms"])  # type: ignore[arg-type]
        last = state["last_ms"]
        out.last_ms = None if last is None else int(last)  # type: ignore[call-overload]
        return out


def calibrated_surprise(
    tail: StreamTail, z: FloatArray, bar: FloatArray | float, s_alert: float
) -> FloatArray:
    """``|z|`` as a surprise on the common scale: the stream's own ``-ln P(X >= |z|)`` scaled
    so that ``bar`` (the threshold in force, per row or for all) maps to ``s_alert``."""
    at_bar = np.maximum(tail.summary.nats(np.asarray(bar, dtype=np.float64)), 1e-9)
    out: FloatArray = tail.summary.nats(z) * (s_alert / at_bar)
    return out
