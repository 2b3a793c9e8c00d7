"""Where a detector's false-alarm rows lie, relative to the labelled anomalies.

A false-alarm rate says how many normal rows were flagged, not why. Three places tell apart
causes that call for different remedies:

- ``overrun``: the row belongs to a run of flagged rows that began at or before an anomalous
  row earlier in the same run: the alert outlasted the fault (its average's lag, hysteresis, or a
  lasting consequence of the fault that the labels call normal);
- ``early``: not an overrun, and within ``window_ms`` before the start of the next anomaly: a
  flag ahead of the label (a precursor, or a label placed late);
- ``apart``: every other false row: an alarm with no labelled anomaly near it.

The three add up to the false positives of :class:`~fleetwatch.evaluation.outliers.Confusion`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleetwatch.evaluation.detections import run_starts


@dataclass(frozen=True)
class FalseRows:
    """False-alarm rows by place; add the counts of several files with ``+``."""

    overrun: int = 0
    early: int = 0
    apart: int = 0

    def __add__(self, other: FalseRows) -> FalseRows:
        return FalseRows(
            self.overrun + other.overrun, self.early + other.early, self.apart + other.apart
        )

    @property
    def total(self) -> int:
        return self.overrun + self.early + self.apart


def false_rows(
    times_ms: npt.NDArray[np.int64],
    truth: npt.NDArray[np.bool_],
    flagged: npt.NDArray[np.bool_],
    window_ms: int,
) -> FalseRows:
    """The false rows (flagged, not anomalous) of one series in time order, by place."""
    false = flagged & ~truth
    if not false.any():
        return FalseRows()
    idx = np.arange(truth.size)
    run_start = np.maximum.accumulate(np.where(run_starts(flagged), idx, -1))
    last_anomalous = np.maximum.accumulate(np.where(truth, idx, -1))
    overrun = false & (last_anomalous >= run_start)
    anomaly_starts = times_ms[run_starts(truth)]
    nxt = np.searchsorted(anomaly_starts, times_ms, side="left")
    has_next = nxt < anomaly_starts.size
    lead = np.where(has_next, anomaly_starts[np.minimum(nxt, anomaly_starts.size - 1)], 0)
    early = false & ~overrun & has_next & (lead - times_ms <= window_ms)
    n_over, n_early = int(overrun.sum()), int(early.sum())
    return FalseRows(n_over, n_early, int(false.sum()) - n_over - n_early)
