"""One labelled file scored as SKAB scores it: the outlier protocol on its rows, the changepoint
protocol on its changepoints, each over the file's test part.

SKAB's published results train each method on the first 400 rows of every file and score the
rest (``train_test_split(train_size=400, shuffle=False)`` in SKAB's ``core/utils.py``); an
online detector runs over the whole file, and only rows from ``scored_from`` on are scored.
Detections are taken from the scored rows alone, so a run of flags that began before them
counts as a detection at their first row, as in SKAB's notebooks.

The changepoint protocol is scored three ways, by what counts as a detection:

- ``openings``: the first row of each run of flagged rows (an alert being raised);
- ``rows``: every flagged row (only the first in a window counts; every other one outside the
  windows is a false positive);
- ``changes``: every change of the flag, as SKAB's notebooks derive changepoints from an outlier
  prediction (run starts and ends).

The false-alarm rows are also counted by where they lie (:mod:`false_rows`: after a fault, in the
same alert; within the window before one; apart from any), with the changepoint window.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fleetwatch.evaluation.changepoints import SKAB_WINDOW_MS, NabTally, nab_tally
from fleetwatch.evaluation.detections import changes, run_starts, runs
from fleetwatch.evaluation.errors import EvaluationError
from fleetwatch.evaluation.false_rows import FalseRows, false_rows
from fleetwatch.evaluation.outliers import Confusion, binary, confusion

SKAB_TRAIN_ROWS = 400


@dataclass(frozen=True)
class SkabTally:
    """Everything SKAB's figures need, of one file or (added with ``+``) of several."""

    files: int = 0
    rows: int = 0
    """Rows scored."""
    confusion: Confusion = field(default_factory=Confusion)
    openings: NabTally = field(default_factory=NabTally)
    rows_nab: NabTally = field(default_factory=NabTally)
    changes_nab: NabTally = field(default_factory=NabTally)
    episodes: int = 0
    """Runs of flagged rows among the scored rows."""
    anomalies: int = 0
    """Runs of anomalous rows among the scored rows."""
    false_rows: FalseRows = field(default_factory=FalseRows)

    def __add__(self, other: SkabTally) -> SkabTally:
        return SkabTally(
            self.files + other.files,
            self.rows + other.rows,
            self.confusion + other.confusion,
            self.openings + other.openings,
            self.rows_nab + other.rows_nab,
            self.changes_nab + other.changes_nab,
            self.episodes + other.episodes,
            self.anomalies + other.anomalies,
            self.false_rows + other.false_rows,
        )


def score_file(
    times_ms: npt.ArrayLike,
    anomaly: npt.ArrayLike,
    changepoint: npt.ArrayLike,
    flags: npt.ArrayLike,
    scored_from: int = SKAB_TRAIN_ROWS,
    window_ms: int = SKAB_WINDOW_MS,
) -> SkabTally:
    """One file, its rows in time order: event times (epoch ms), the ``anomaly`` and
    ``changepoint`` labels (0/1) and the detector's flags (0/1), from row ``scored_from`` on."""
    times = np.asarray(times_ms, dtype=np.int64)
    truth = binary(anomaly, "anomaly labels")
    points = binary(changepoint, "changepoint labels")
    flagged = binary(flags, "flags")
    if not times.size == truth.size == points.size == flagged.size:
        raise EvaluationError(
            f"{times.size} times, {truth.size} anomaly labels, {points.size} changepoint "
            f"labels and {flagged.size} flags: one of each per row"
        )
    if scored_from < 0:
        raise EvaluationError(f"scored_from must not be negative, got {scored_from}")
    if (np.diff(times) < 0).any():
        raise EvaluationError("rows must be in time order")
    times, truth, points, flagged = (
        times[scored_from:],
        truth[scored_from:],
        points[scored_from:],
        flagged[scored_from:],
    )
    starts = run_starts(flagged)
    return SkabTally(
        files=1,
        rows=int(times.size),
        confusion=confusion(truth, flagged),
        openings=nab_tally(times[points], times[starts], window_ms),
        rows_nab=nab_tally(times[points], times[flagged], window_ms),
        changes_nab=nab_tally(times[points], times[changes(flagged)], window_ms),
        episodes=int(starts.sum()),
        anomalies=runs(truth),
        false_rows=false_rows(times, truth, flagged, window_ms),
    )
