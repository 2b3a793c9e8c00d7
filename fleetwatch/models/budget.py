"""The false-alert budget as feedback: a stream that opens alerts faster than its budget has its
evidence discounted until it does not.

A detector's threshold comes from a model of its statistic (a Gaussian, or the stream's own
tail, :mod:`fleetwatch.models.tail`); a stream whose noise that model does not capture — heavy
tails, bursts, regimes — opens alert after alert. The budget counts the *openings* of each
stream (a new excursion past the alert level, not the rows of one), decayed with a half-life
of ``HALFLIFE_MS`` of event time, and compares them with what the budget allows over that
time plus ``SLACK`` (a few openings are what a detector is for: a real anomaly, a burst of
them in an incident). Beyond that, the stream's surprise is lowered by the log of the
overspend, ``ln(openings / allowed)`` nats — the per-reading probability the stream must beat
divided by the overspend — until its openings fall back within it. A long anomaly is one
opening, so it does not teach the stream to be quiet; a stream of many short false alarms
does. The state is three numbers per stream, in the detector's parameters.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
DAY_MS = 86_400_000.0
HALFLIFE_MS = 6 * 3_600_000.0
SLACK = 2.0
"""Openings within the half-life that are never discounted, whatever the budget."""
RELAX_MS = 24 * 3_600_000.0
"""Half-life of the discount while the stream opens nothing."""
WIDTH = 4
"""Per stream: ``[decayed openings, event time they are decayed to, alerting after it, the
discount in nats at that time]``."""


def allowed(per_day: float, streams: int) -> float:
    """Openings a stream may have within the half-life before it is discounted."""
    return per_day * (HALFLIFE_MS / DAY_MS) / max(streams, 1) + SLACK


def grow(state: FloatArray, streams: int) -> FloatArray:
    """``state`` with rows for new streams (no openings, never alerted)."""
    extra = streams - state.shape[0]
    if extra <= 0:
        return state
    return np.concatenate([state, np.zeros((extra, WIDTH))])


def penalty(state: FloatArray, stream: int, at_ms: int, limit: float) -> float:
    """The nats taken off the stream's surprise at ``at_ms``."""
    _, last_ms, _, cut = state[stream]
    if cut <= 0:
        return 0.0
    return float(cut * 2.0 ** (-max(at_ms - last_ms, 0.0) / RELAX_MS))


def record(
    state: FloatArray, stream: int, event_ms: npt.NDArray[np.int64], on: BoolArray, limit: float
) -> None:
    """Count the stream's openings among readings at ``event_ms`` (in time order) alerting
    ``on``, continuing from whether it alerted after its previous reading. Each opening that
    leaves the openings over ``limit`` adds ``ln(openings / limit)`` to the discount (and one
    under it takes that much off): the discount integrates the overspend, so it settles where
    the openings meet the budget, whatever the shape of the stream's tail."""
    if event_ms.size == 0:
        return
    count, last_ms, was_on, cut = state[stream]
    previous = np.concatenate([[bool(was_on)], on[:-1]])
    for t in event_ms[on & ~previous].tolist():
        gap = max(t - last_ms, 0.0)
        count = count * 2.0 ** (-gap / HALFLIFE_MS) + 1.0
        cut = max(0.0, cut * 2.0 ** (-gap / RELAX_MS) + math.log(count / limit))
        last_ms = float(t)
    end = float(event_ms[-1])
    if end > last_ms:
        count *= 2.0 ** (-(end - last_ms) / HALFLIFE_MS)
        cut *= 2.0 ** (-(end - last_ms) / RELAX_MS)
        last_ms = end
    state[stream] = (count, last_ms, float(bool(on[-1])), cut)
