"""The states a fleet's devices hold, as a prior for a device that has not seen them itself.

A metric that switches between a few states (a machine's speed, running or stopped; a valve, open
or shut) is, for one device, a first regime it learned and a second it learns once it has seen it
(:mod:`~fleetwatch.models.seasonal`). Until then a switch into the other state is many deviations
off everything the device knows, and every member that judges the metric against its own profile
reads it as a fault. The devices of its scope that switch already hold both states. So the prior
of a metric's level is a mixture: the device's own regimes, and the states its fleet's devices
hold. It is a hierarchical prior, in which a device with little data of its own borrows the
parameters of the similar devices of its fleet (Dhada, Girolami and Parlikad 2020,
*Data-Centric Engineering*), here the regimes they are in. A reading nearer a state the fleet
knows than to its own regime, and that state :data:`SEPARATION` apart from the regime, is judged
against that state.

A state is one regime of one device: its mean and standard deviation over all its readings
(``[mean, std]``). Only devices that hold two regimes lend theirs: a fleet of single-state
devices (temperature sensors, each at its own level) knows no states, so a device moved to
another's level is still a fault. The price where the fleet switches: a fault that moves a
device into a state some device of its kind holds normal is not a change of level to its members
(the pooled multivariate model's :meth:`~fleetwatch.models.base.Detector.familiar_times` pays the
same, for states of several metrics). The states travel with the pooled tails of a scope
without a multivariate part (:class:`PooledTail`, :mod:`~fleetwatch.fleet.tails`): where the
fleet model has one, that part tells the states its devices hold, of every metric together.

A borrowed state is judged with the wider of the device's own spread and the state's, as a young
second regime of the device's own is: the device has seen none of its readings.

The same prior holds for a metric's spread: a pooled tail also carries the fleet's typical
spread of the metric (:attr:`PooledTail.spread`, the median over its devices of their first
regime's typical bucket spread), toward which a young stream's own spread is drawn
(:func:`drawn_to_fleet`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Self

import numpy as np
import numpy.typing as npt

from fleetwatch.models.grid import floor_std, shrink
from fleetwatch.models.tail import StreamTail

FloatArray = npt.NDArray[np.float64]

SEPARATION = 3.0
"""A second regime (a device's own, or a state of its fleet) is used once its mean is this many
standard deviations (the wider of the two regimes') from the first's: a running machine's
vibration, 4 ± 1, against its 0.15 stopped is 3.9 apart."""


class PooledTail(StreamTail):
    """A fleet's pooled tail of one metric (:mod:`~fleetwatch.fleet.tails`), with the states its
    devices hold: ``states``, a row ``[mean, std]`` per state (none: no device of the scope
    holds two); and ``spread``, the metric's typical standard deviation over its devices (NaN:
    none known)."""

    def __init__(self, halflife: float, prior: float = 0.0) -> None:
        super().__init__(halflife, prior)
        self.states: FloatArray = np.zeros((0, 2))
        self.spread = math.nan

    @classmethod
    def load(cls, halflife: float, state: dict[str, object], prior: float = 0.0) -> Self:
        """From :meth:`state` with the states (``"states"``: a ``[mean, std]`` a state) and the
        spread (``"spread"``; absent or null: none known)."""
        out = super().load(halflife, state, prior)
        held = state.get("states") or []
        out.states = np.asarray(held, dtype=np.float64).reshape(-1, 2)
        spread = state.get("spread")
        out.spread = math.nan if spread is None else float(spread)  # type: ignore[arg-type]
        return out

    def state(self) -> dict[str, object]:
        spread = self.spread if math.isfinite(self.spread) else None
        return {**super().state(), "states": self.states.tolist(), "spread": spread}


def states_of(pooled: Mapping[str, StreamTail], metric: str) -> FloatArray:
    """The states the fleet knows of ``metric`` (none without a pooled tail that carries them)."""
    tail = pooled.get(metric) if pooled else None
    return tail.states if isinstance(tail, PooledTail) else np.zeros((0, 2))


def spread_of(pooled: Mapping[str, StreamTail], metric: str) -> float:
    """The fleet's typical spread of ``metric`` (NaN without a pooled tail that carries one)."""
    tail = pooled.get(metric) if pooled else None
    return tail.spread if isinstance(tail, PooledTail) else math.nan


def drawn_to_fleet(std: FloatArray, seen: FloatArray, spread: float, prior: float) -> FloatArray:
    """A stream's standard deviation ``std`` of ``seen`` readings drawn toward its fleet's
    typical ``spread``, as if the stream had ``prior`` readings of that spread besides its own:
    the pooled variance ``(seen · std² + prior · spread²) / (seen + prior)``, the posterior mean
    of a normal's variance under a conjugate (inverse-gamma) prior centred on the fleet's. A
    stream of a few dozen readings is judged mostly by its fleet's spread, one of thousands by
    its own (``std`` itself without a finite, positive ``spread``)."""
    if not (math.isfinite(spread) and spread > 0):
        return std
    seen = np.maximum(seen, 0.0)
    with np.errstate(invalid="ignore"):
        out: FloatArray = np.sqrt((seen * np.square(std) + prior * spread**2) / (seen + prior))
    return out


def nearest_state(
    value: FloatArray, mean: FloatArray, std: FloatArray, step: FloatArray, states: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per reading (``value``, against its own regime's ``mean`` and ``std``; ``step`` its grid),
    the nearest of ``states`` that is :data:`SEPARATION` apart from its regime: its mean, the
    spread it is judged with (the wider of the regime's and the state's) and the reading's
    ``|z|`` from it (``inf`` where no state is apart)."""
    n = value.size
    if states.size == 0 or n == 0:
        inf = np.full(n, np.inf)
        return np.full(n, np.nan), inf, inf
    means, spreads = states[None, :, 0], states[None, :, 1]
    with np.errstate(invalid="ignore"):
        wider = floor_std(np.maximum(std[:, None], spreads), step[:, None])
        apart = np.abs(means - mean[:, None]) >= SEPARATION * wider
        z = np.abs(shrink(value[:, None] - means, step[:, None])) / wider
    z = np.where(apart & np.isfinite(z), z, np.inf)
    best = np.argmin(z, axis=1)[:, None]
    pick = np.take_along_axis
    return (
        pick(np.broadcast_to(means, z.shape), best, 1)[:, 0],
        pick(wider, best, 1)[:, 0],
        pick(z, best, 1)[:, 0],
    )
