"""One calibrated decision per device: the tail of the device's strongest evidence, held to the
device's budget of false alerts.

Each member of a device's detector reports, per row (a reading of one metric), a surprise on
the common scale (:mod:`~fleetwatch.models.calibration`). The device's statistic at a reading is
the largest surprise any member gives any of its metrics there, ``D = max s``, in nats. Its
calibration is a :class:`~fleetwatch.models.tail.StreamTail` over ``D``, the same mechanism a
member holds per metric, in the manner of SPOT (Siffer et al., KDD 2017: a generalised Pareto
tail over the peaks of a stream, updated online): a decayed body of ``D`` on normal readings,
the peaks of its excursions, and a threshold where those peaks pass at the device's budget,
``score.false_alerts_per_device_day``, whatever the number of metrics and members behind
``D``. An excursion is one episode of the device, so the budget counts alerts, not readings.

The decision is ``D >= threshold``; every member's surprise is then mapped through the device's
own tail (:func:`~fleetwatch.models.tail.calibrated_surprise`) so the threshold is the common
alert level: a row alerts exactly when the device's evidence there passes its threshold, its
explanation is still its member's and metric's, and its score is a monotone function of the
device's tail probability of that evidence.

While the device's own tail is short it cannot set a threshold of its own: until it knows
``MIN_PEAKS`` excursions the threshold is what the budget alone implies for the device's
member streams together (:meth:`DeviceTail.prior`); after, its own excursions' level weighed
with that prior, the prior counting as ``MIN_PEAKS`` excursions, so the device's own history
outweighs it as it grows. A surprise ``-ln p`` of a calibrated statistic is exponential, so its
tail is fitted with no prior shape.

The state (the tail's body, peaks and open excursion) is part of the combined detector's
parameters: the trainer learns it with the members, the scorer and file mode read it from the
parameter version they score with, so a replay of the same versions decides the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetwatch.models.calibration import S_ALERT
from fleetwatch.models.tail import MIN_PEAKS, StreamTail, calibrated_surprise

FloatArray = npt.NDArray[np.float64]


class DeviceTail:
    """The calibration of one device's evidence as a whole, for a budget of ``budget`` false
    alerts a day, remembering about ``halflife`` readings: its members' own tail memory, so the
    device forgets at the pace its evidence does."""

    def __init__(
        self, budget: float, halflife: float, tail: StreamTail | None = None, streams: int = 1
    ) -> None:
        self.budget = budget
        self.tail = StreamTail(halflife) if tail is None else tail
        self.streams = streams
        """How many member streams (a per-metric member's metrics, a joint member) ``D`` is
        the largest of."""

    def prior(self) -> float:
        """The threshold the budget sets before the device's own excursions can: each of the
        ``streams`` member streams reaches the common alert level at the per-reading rate the
        budget allows one stream, so holding the device to the budget takes each to a
        ``streams``-th of it, ``ln streams`` nats further on every member's ``-ln p`` scale
        (the union bound)."""
        nats = -math.log(self.tail.p(self.budget, 1.0, 1))
        return S_ALERT * (1.0 + math.log(max(self.streams, 1)) / nats)

    def threshold(self) -> float:
        """The level of ``D`` that the device's false alerts pass ``budget`` times a day: the
        :meth:`prior` until the device knows ``MIN_PEAKS`` excursions, then the level its own
        excursion peaks set, the prior weighing as ``MIN_PEAKS`` of them; never below the
        common alert level."""
        prior = self.prior()
        tail = self.tail
        if not tail.knows_excursions():
            return prior
        own = tail.threshold(self.budget, 1.0, 1, S_ALERT)
        seen = tail.excursions_seen()
        return max(S_ALERT, (seen * own + MIN_PEAKS * prior) / (seen + MIN_PEAKS))

    def learn(
        self,
        event_ms: npt.NDArray[np.int64],
        surprises: Sequence[FloatArray],
        keep: npt.NDArray[np.bool_],
        streams: int,
    ) -> None:
        """Take in a batch of the device's rows (``event_ms`` per row, in the batch's order),
        each member's surprise of every row, and the rows that may be learned: every reading
        goes into the excursions, a reading whose rows are all kept into the body. ``streams``:
        how many member streams the device has now."""
        self.streams = max(self.streams, streams)
        if event_ms.size == 0:
            return
        times, statistic, where = reading_statistic(event_ms, surprises)
        kept = np.ones(times.size, dtype=bool)
        np.logical_and.at(kept, where, keep)
        cap = self.threshold()
        self.tail.observe(times)
        self.tail.summary.add(statistic[kept])
        self.tail.excursions(statistic, cap)

    def calibrate(self, surprise: FloatArray) -> FloatArray:
        """Each row's surprise on the device's own scale: ``-ln P(D >= s)`` under the device's
        tail, scaled so that its threshold is the common alert level."""
        return calibrated_surprise(self.tail, np.maximum(surprise, 0.0), self.threshold(), S_ALERT)

    def state(self) -> dict[str, Any]:
        return {**self.tail.state(), "streams": self.streams}

    @classmethod
    def load(cls, budget: float, halflife: float, state: dict[str, Any]) -> DeviceTail:
        tail = StreamTail.load(halflife, state)
        return cls(budget, halflife, tail, int(state.get("streams", 1)))


def reading_statistic(
    event_ms: npt.NDArray[np.int64], surprises: Sequence[FloatArray]
) -> tuple[npt.NDArray[np.int64], FloatArray, npt.NDArray[np.intp]]:
    """Per reading (distinct event time, in order): its time and ``D``, the largest surprise of
    any member and row at it; and each row's reading."""
    times, where = np.unique(event_ms, return_inverse=True)
    top = np.zeros(times.size)
    for surprise in surprises:
        np.maximum.at(top, where, np.nan_to_num(surprise, nan=0.0, posinf=1e300))
    return times, top, where
