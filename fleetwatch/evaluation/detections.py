"""From flagged rows to detections: where runs of flagged rows start, and where the flag
changes.

A *run* is a stretch of consecutive flagged rows. File mode has no episode of its own (it flags
rows), so a run is what an operator would see as one alert. The streaming scorer's episodes
differ: they are kept per metric and detector, open only after a few anomalous readings and
close only after several calm ones.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fleetwatch.evaluation.outliers import binary

BoolArray = npt.NDArray[np.bool_]


def run_starts(flags: npt.ArrayLike) -> BoolArray:
    """True at the first row of each run of flagged rows (the first row, when flagged, too)."""
    flagged = binary(flags, "flags")
    before = np.concatenate(([False], flagged[:-1]))
    starts: BoolArray = flagged & ~before
    return starts


def changes(flags: npt.ArrayLike) -> BoolArray:
    """True where the flag differs from the row before (the first row: where it is flagged).

    SKAB's own notebooks turn an outlier prediction into changepoint predictions this way
    (``abs(prediction.diff())``, the first row the prediction itself): both the start and the
    end of every run are changepoints.
    """
    flagged = binary(flags, "flags")
    before = np.concatenate(([False], flagged[:-1]))
    changed: BoolArray = flagged != before
    return changed


def runs(flags: npt.ArrayLike) -> int:
    """How many runs of flagged rows."""
    return int(run_starts(flags).sum())
