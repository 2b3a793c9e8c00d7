"""A metric's reading grid: the step its readings are quantised to, learned online.

Sensors report on a grid — whole per cent, integer counts, 0.1 °C, 1 rpm. A reading ``x`` then
stands for any true value within half a step of it, and the error of rounding is about uniform
over the step, with standard deviation ``step / √12``. A detector that learns a metric's spread
from readings that sit on one or two grid values can learn a spread far below that (a charge
level at 54 % for an hour has a spread of almost 0) and then alerts on every flicker to the
next value. Two corrections follow, shared by every member that models a metric's value:

- :func:`floor_std`: a spread is never below half a step (:data:`GRID_SD`);
- :func:`shrink`: a deviation from the expected value is taken ``step / 2`` nearer to 0 — the
  nearest the true value may be (a reading ``k`` steps away says the true value is at least
  ``k - ½`` steps away), so the tail probability of a grid value is the model's tail at its
  cell's edge.

The step is learned from the successive differences of a metric's readings (all of them, the
sensor's grid does not change with the device's state): the first non-zero difference is the
candidate; a difference that is a whole multiple of it counts for it; a smaller one that it
is a multiple of, or a common divisor of both not below ``1 / MAX_REFINE`` of it, refines it
once it has held at least twice
(a count seen rising by 3, then 2, is on a grid of 1); any other counts against it, and once
those outweigh the ones for it, that difference is the new candidate. Both counts decay by
half every ``HALFLIFE`` non-zero differences. The step is *confirmed* once at least
``MIN_ON`` differences were on it and no more than ``MAX_OFF`` of that many off it. A
continuous signal never confirms one (its differences are not whole multiples of each other,
within ``TOL`` of a step); a signal printed with a fixed number of decimals confirms its last
decimal, a floor too small to matter. Until a step is confirmed the detectors use a
*provisional* one: the last decimal the latest reading was written with, or the candidate if
finer. A level that has not moved yet has a spread of 0, and without it its first move by one
step of its grid would be an alert however young the stream.

State per metric: ``[step, on, off, last value]``, in the detector's parameters (a missing
field loads as no grid learned yet). Learning is sequential per metric, so mini-batches give
the state of one batch (up to the rounding of the decay).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from fleetwatch.models.batch import per_metric_runs

FloatArray = npt.NDArray[np.float64]
WIDTH = 4
HALFLIFE = 500.0
MIN_ON = 3.0
"""Differences on a step (decayed: four in practice) before it is confirmed: few, so that a slow
level (a charge that moves a per cent every few minutes) confirms its grid within its first
moves."""
MAX_OFF = 0.1
TOL = 1e-3
"""How near a whole multiple of the step a difference must be, in steps."""
MAX_REFINE = 16.0
_EPS = float(np.finfo(np.float64).eps)
"""float64's resolution: ``x / q`` is within about ``|x / q| · _EPS`` of its exact value."""
_POWERS = [10.0**-k for k in range(int(-math.log10(_EPS)) + 1)]
"""1, 0.1, …, down to the finest decimal :func:`_written` can tell: a value within ``TOL`` of 0
is a multiple of 1, and for any larger one the finest it tells, ``|x| · _EPS / TOL``, is at
least ``_EPS``."""
GRID_SD = 0.5
"""The floor of a spread on a grid, in steps. The rounding alone is ``1 / √12`` (0.29), but a
stream that sits on one or two values of its grid says nothing of its noise below the step,
only that it is not much wider than half of it: half a step is the widest noise such readings
allow. A reading two steps off its level is then ``|z|`` 3 (1.5 steps after :func:`shrink`, over
0.5), where ``1 / √12`` would make it 5.2, past the floor of every threshold.
"""
_KEEP = 2.0 ** (-1.0 / HALFLIFE)


def floor_std(std: npt.ArrayLike, step: npt.ArrayLike) -> FloatArray:
    """``std`` not below ``GRID_SD`` of ``step`` (0: no grid)."""
    out: FloatArray = np.maximum(np.asarray(std, np.float64), GRID_SD * np.asarray(step))
    return out


def shrink(deviation: npt.ArrayLike, step: npt.ArrayLike) -> FloatArray:
    """``deviation`` taken half a ``step`` nearer to 0 (0 within half a step)."""
    d = np.asarray(deviation, np.float64)
    out: FloatArray = np.sign(d) * np.maximum(np.abs(d) - 0.5 * np.asarray(step), 0.0)
    return out


def _written(x: float) -> float:
    """The last decimal ``x`` was written with: the coarsest of 1, 0.1, 0.01, … that it is a
    whole multiple of (to within ``TOL`` of that step), 0 for none or a value not finite (0
    itself counts as a multiple of 1). The candidate decimals stop where float64 can no longer
    tell them: below ``q = |x| · _EPS / TOL`` the rounding of ``x / q`` alone reaches ``TOL`` of a
    step, and a reading of any decimals would pass."""
    if not math.isfinite(x):
        return 0.0
    finest = abs(x) * _EPS / TOL
    for q in _POWERS:
        if q < finest:
            break
        ratio = x / q
        if abs(ratio - round(ratio)) <= TOL:
            return q
    return 0.0


def _confirmed(step: float, on: float, off: float) -> float:
    """``step`` once at least ``MIN_ON`` differences were on it and at most ``MAX_OFF`` of that
    many off it, else 0."""
    return step if on >= MIN_ON and off <= MAX_OFF * on else 0.0


def _divisor(a: float, b: float) -> float:
    """The greatest common divisor of ``a`` and ``b`` to within ``TOL`` of the smaller, or 0
    when it comes below ``1 / MAX_REFINE`` of the larger (not a grid they share)."""
    hi, lo = max(a, b), min(a, b)
    floor = hi / MAX_REFINE
    while lo >= floor:
        rest = math.fmod(hi, lo)
        if rest <= TOL * lo or lo - rest <= TOL * lo:
            return lo
        hi, lo = lo, rest
    return 0.0


def _walk(row: list[float], diffs: list[float]) -> None:
    """Move ``[step, on, off]`` over non-zero differences, in order."""
    step, on, off = row[0], row[1], row[2]
    for d in diffs:
        on *= _KEEP
        off *= _KEEP
        if step <= 0:
            step, on = d, on + 1.0
            continue
        # :func:`_on_step`, written out: a continuous signal walks every difference
        ratio = d / step
        k = round(ratio) if math.isfinite(ratio) else 0
        if k >= 1 and abs(d - k * step) <= TOL * step:
            on += 1.0
            continue
        g = _divisor(step, d) if on >= 1.5 else 0.0  # a candidate that held at least once
        if g > 0:
            step, on = g, on + 1.0
            continue
        off += 1.0
        if off > on:
            step, on, off = d, 1.0, 0.0
    row[0], row[1], row[2] = step, on, off


MEMO_SIZE = 256
_LEARNED: dict[bytes, tuple[float, float, float, float]] = {}
"""A row learned from readings, by the row and the readings: the members of a combined
detector learn the same readings into the same grid, and it is worked out once (a pure
function of its key, so nothing depends on what the memo holds)."""
_STEPS: dict[bytes, FloatArray] = {}
"""The steps of a grid (:meth:`Grid.steps`, read-only), by its rows: the members' grids of the
same readings are the same rows (a pure function of its key, as :data:`_LEARNED`)."""


def _learned(row: FloatArray, values: FloatArray) -> tuple[float, float, float, float]:
    """``row`` after ``values`` (no NaN): their non-zero differences, from the last value the
    row holds, on its step, or walked (in plain floats: a batch's few dozen values cost less
    so than in numpy calls)."""
    step, on, off, last = row.tolist()
    series = values.tolist()
    if not math.isnan(last):
        series.insert(0, last)
    d = [x for x in map(abs, map(operator.sub, series[1:], series[:-1])) if x > 0]
    state = [step, on, off]
    if d:
        if step > 0 and all(_on_step(x, step) for x in d):
            fade = _KEEP ** len(d)
            added = (1.0 - fade) / (1.0 - _KEEP)
            state = [step, on * fade + added, off * fade]
        else:
            _walk(state, d)
    return state[0], state[1], state[2], series[-1]


def _on_step(d: float, step: float) -> bool:
    """Whether a difference ``d`` is a whole number (at least 1) of ``step`` to within
    ``TOL`` of it."""
    ratio = d / step
    if not math.isfinite(ratio):
        return False
    k = round(ratio)  # to the even whole number at a half, as numpy's rint
    return k >= 1 and abs(d - k * step) <= TOL * step


class Grid:
    """The grid of each of a detector's metrics (rows in the detector's metric order)."""

    def __init__(self, state: FloatArray | None = None) -> None:
        self.rows: FloatArray = np.zeros((0, WIDTH)) if state is None else state
        self._steps: tuple[bytes, FloatArray] | None = None

    def grow(self, metrics: int) -> None:
        extra = metrics - self.rows.shape[0]
        if extra > 0:
            fresh = np.zeros((extra, WIDTH))
            fresh[:, 3] = np.nan
            self.rows = np.concatenate([self.rows, fresh])

    def learn(self, metric: int, values: FloatArray) -> None:
        """Take in one metric's readings, in time order (NaN skipped)."""
        values = values[~np.isnan(values)]
        if values.size == 0:
            return
        key = self.rows[metric].tobytes() + values.tobytes()
        held = _LEARNED.get(key)
        if held is None:
            held = _learned(self.rows[metric], values)
            if len(_LEARNED) >= MEMO_SIZE:
                _LEARNED.clear()
            _LEARNED[key] = held
        self.rows[metric] = held

    def learn_rows(self, codes: npt.NDArray[np.intp], value: FloatArray, metrics: int) -> None:
        """A batch's readings (``codes`` into the detector's ``metrics``, rows in time order)."""
        self.grow(metrics)
        for m, rows in per_metric_runs(codes, metrics):
            self.learn(m, value[rows])

    def per_row(self, codes: npt.NDArray[np.intp]) -> FloatArray:
        """Per row, its metric's confirmed step (0: none, or a metric not learned)."""
        steps = self.steps()
        if steps.size == 0:
            return np.zeros(codes.size)
        out: FloatArray = np.where(codes >= 0, steps[np.maximum(codes, 0)], 0.0)
        return out

    def confirmed(self) -> FloatArray:
        """Per metric, its confirmed step, 0 where none is."""
        rows = self.rows.tolist()
        return np.asarray([_confirmed(s, on, off) for s, on, off, _ in rows], np.float64)

    def steps(self) -> FloatArray:
        """Per metric, the step its detectors use: the confirmed one, else the provisional one
        (the last decimal its latest reading was written with, or the candidate step if finer:
        a level that sat at 80 % all its short life has a step of 1, so its first move to 79 %
        is one step of a grid, not a jump against a spread of 0); 0 for a metric with no reading
        yet (read-only)."""
        key = self.rows.tobytes()
        if self._steps is None or self._steps[0] != key:
            out = _STEPS.get(key)
            if out is None:
                used = [  # a few metrics: plain floats
                    _confirmed(step, on, off)
                    or (0.0 if math.isnan(last) else min(_written(last), step or math.inf))
                    for step, on, off, last in self.rows.tolist()
                ]
                out = np.asarray(used, np.float64)
                out.flags.writeable = False
                if len(_STEPS) >= MEMO_SIZE:
                    _STEPS.clear()
                _STEPS[key] = out
            self._steps = (key, out)
        return self._steps[1]

    def state(self) -> list[list[float | None]]:
        return [[None if v != v else v for v in row] for row in self.rows.tolist()]  # NaN: None

    @classmethod
    def load(cls, state: Sequence[Sequence[float | None]] | None, metrics: int) -> Grid:
        """From :meth:`state`; ``None`` (parameters from before grids): nothing learned."""
        out = cls()
        if state is not None:
            rows = [[math.nan if v is None else float(v) for v in row] for row in state]
            out.rows = np.asarray(rows, np.float64).reshape(len(rows), WIDTH)
        if out.rows.shape[0] > metrics:
            raise ValueError(f"a grid of {out.rows.shape[0]} metrics for {metrics}")
        out.grow(metrics)
        return out
