"""A pattern break that lasts: the joint (PCA) member's evidence over consecutive readings.

The joint member scores each reading by its residual energy ``Q`` off the metrics' principal
subspace, χ² with ``h`` degrees of freedom under Gaussian readings. Read one reading at a time,
that model is blind to a metric's own tail: a Student-t voltage breaks a meter's tie with its
load by six standard deviations many times a day, each a "one-in-a-million" reading.
A shock in one metric on one reading is that metric's own members' to judge, against its own
tail; what only the joint member sees is a tie that *stays* broken. So a reading's surprise is
the largest of three kinds of evidence:

- **broken twice**: the smaller of its surprise and that of the reading before it (a break of
  two readings in a row is alerted on at the second);
- **broken for a while**: the residual energy of the last :data:`WINDOW` readings, each capped at
  the level a reading passes once in :data:`CAP_P` (so one shock adds at most that), judged as
  χ² with ``WINDOW · h`` degrees of freedom (Wilson-Hilferty). Capping only lowers the sum, so
  the judgement stays conservative. A moderate break on every reading — a humidity that stops
  following its temperature, each reading a few deviations off — alerts within a few readings,
  where the one-reading model waits for one extreme reading (and "broken twice" for two);
- **broken beyond doubt**: a break of one reading alone, at a third of its surprise (it alerts
  at 3 · 13.8 = 41.4 nats, ``p ≤ 1e-18`` under the χ² model, where heavy-tailed shocks seldom
  reach): a spike of a tied metric that its own members find unusual but do not alert on
  (judging it against a tail wide enough for the machine's on and off states, or held to a
  young metric's early threshold). The joint member passes what the metric's own members found
  (:meth:`~fleetwatch.models.multivariate.PcaDetector._carry`): where they found the reading
  no more than calm, a break of it alone is no evidence.

What is carried from one batch to the next is the surprise of the last reading and the capped
energies of the ``WINDOW - 1`` before it (:data:`CARRIED`).

The window is three readings: with the cap at 1e-3 that is three readings in a row, each about
that unusual. A longer window would also sum a machine's slowly loosening ties (a pump's, as it
warms) into long alerts apart from any fault.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri

from fleetwatch.models.calibration import normal_upper_surprise

FloatArray = npt.NDArray[np.float64]

WINDOW = 3
"""Readings over which a sustained break's energy is summed."""
CAP_P = 1e-3
"""Each reading adds at most the energy a reading passes once in this many (under χ²)."""
CAP_Z = float(-ndtri(CAP_P))
"""The standard normal's upper ``CAP_P`` quantile."""
SINGLE = 3.0
"""A break of one reading alone counts at its surprise over this: it alerts alone at
``p ≤ ALERT_P ** SINGLE`` (1e-18) under the χ² model."""
CARRIED = WINDOW
"""Floats carried between batches: the last surprise and ``WINDOW - 1`` capped energies."""


def chi2_deviate(energy: FloatArray, dof: FloatArray | float) -> FloatArray:
    """``energy`` (χ² with ``dof`` degrees of freedom under the model) as a standard normal
    deviate, by the Wilson-Hilferty transform."""
    k = np.asarray(dof, dtype=np.float64)
    out: FloatArray = ((energy / k) ** (1.0 / 3.0) - (1.0 - 2.0 / (9.0 * k))) / np.sqrt(
        2.0 / (9.0 * k)
    )
    return out


def energy_cap(dof: int) -> float:
    """The energy a reading of ``dof`` degrees of freedom passes once in :data:`CAP_P`: the
    inverse of :func:`chi2_deviate` at :data:`CAP_Z`."""
    v = 2.0 / (9.0 * dof)
    return float(dof * (1.0 - v + CAP_Z * math.sqrt(v)) ** 3)


def lasting(
    surprise: FloatArray,
    energy: FloatArray,
    carried: Sequence[float],
    dof: int,
    window: bool,
    single: FloatArray | None = None,
) -> tuple[FloatArray, list[float]]:
    """The lasting surprise of consecutive complete readings — their one-reading ``surprise``
    and residual ``energy`` in time order — continuing from ``carried`` (what the call before
    returned; empty: nothing before, as if the reading before had been calm), and what to carry
    on. ``window``: also the sum over the last :data:`WINDOW` readings (off where the surprise
    is not the χ² model's, a device's own tail judges it). ``single``: the evidence of a break of
    one reading alone, per reading (default: its surprise over :data:`SINGLE`)."""
    if not surprise.size:
        return surprise, list(carried)
    before = carried[0] if carried else 0.0
    previous = np.concatenate(([before], surprise[:-1]))
    alone = surprise / SINGLE if single is None else single
    out: FloatArray = np.maximum(np.minimum(surprise, previous), alone)
    capped = np.concatenate(
        (np.asarray(carried[1:], dtype=np.float64), np.minimum(energy, energy_cap(dof)))
    )
    if window:
        sums = np.cumsum(np.concatenate(([0.0], capped)))
        end = np.arange(capped.size - surprise.size, capped.size) + 1
        start = np.maximum(end - WINDOW, 0)
        count = (end - start).astype(np.float64)
        sustained = normal_upper_surprise(chi2_deviate(sums[end] - sums[start], count * dof))
        out = np.maximum(out, sustained)
    return out, [float(surprise[-1]), *capped[-(WINDOW - 1) :].tolist()]
