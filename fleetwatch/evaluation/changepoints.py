"""SKAB's changepoint protocol: NAB-style scoring of detections in a window after each
labelled changepoint.

As SKAB scores it (``tsad``'s ``evaluating(metric="nab", window_width="60s",
anomaly_window_destination="righter")``, the same code as SKAB's ``core/metrics.py``):

- each changepoint at time t has the window [t, t + width], both ends included. Where a window
  reaches the next one's start, the next starts where this one ends (tsad's "cut right
  window"), so windows never overlap (they may touch: a detection at the shared instant is in
  both);
- in a window only the *first* detection counts, as a true positive worth the scoring curve at
  its relative position (detection - window start) / (window end - window start); later
  detections in the same window count for nothing;
- a window without a detection is a false negative, worth A_FN;
- every detection outside all windows is a false positive, worth A_FP each;
- A_TN weighs nothing (it is in the profiles because NAB's table has it);
- the raw score S, the null score (every window missed: windows · A_FN) and the perfect score
  (windows · A_TP) are summed over files, and the result is
  100 · (S - S_null) / (S_perfect - S_null).

The scoring curve is tsad's "improved" scaled sigmoid, not NAB's original: with x sampled at
1000 points from -π/2 to π/2, A_FP + (A_TP - A_FP) / 2 · (1 - tanh(x) / tanh(π/2)), read at
index ⌊1000 · relative position⌋ (the last sample for a detection at the window's end). It is
A_TP at the window's start, A_FP at its end, and close to their mean halfway.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from fleetwatch.evaluation.errors import EvaluationError

CURVE_POINTS = 1000
"""Samples of the scoring curve (tsad's ``detalization``)."""
SKAB_WINDOW_MS = 60_000
"""SKAB's window: 60 s to the right of each changepoint."""

_X = np.linspace(-np.pi / 2, np.pi / 2, CURVE_POINTS)


@dataclass(frozen=True)
class Profile:
    """NAB's application profile: the weight of a true positive, false positive, true negative
    and false negative."""

    a_tp: float
    a_fp: float
    a_tn: float
    a_fn: float


STANDARD = Profile(1.0, -0.11, 1.0, -1.0)
LOW_FP = Profile(1.0, -0.22, 1.0, -1.0)
LOW_FN = Profile(1.0, -0.11, 1.0, -2.0)
PROFILES: Mapping[str, Profile] = {"standard": STANDARD, "low_fp": LOW_FP, "low_fn": LOW_FN}


def _times(values: npt.ArrayLike, what: str) -> npt.NDArray[np.int64]:
    array = np.asarray(values, dtype=np.int64)
    if array.ndim != 1:
        raise EvaluationError(f"{what} must be one-dimensional, got shape {array.shape}")
    return array


def right_windows(changepoints_ms: npt.ArrayLike, width_ms: int) -> list[tuple[int, int]]:
    """[t, t + width] for each changepoint t (strictly increasing, epoch ms), each window that
    would overlap the one before starting where that one ends."""
    if width_ms <= 0:
        raise EvaluationError(f"the window must be positive, got {width_ms} ms")
    starts = _times(changepoints_ms, "changepoints")
    if (np.diff(starts) <= 0).any():
        raise EvaluationError("changepoint times must be strictly increasing")
    windows = [[int(t), int(t) + width_ms] for t in starts]
    for before, after in pairwise(windows):
        if before[1] >= after[0]:
            after[0] = before[1]
    return [(left, right) for left, right in windows]


def curve(relative: float, profile: Profile) -> float:
    """The worth of a true positive at ``relative`` (0 = window start, 1 = end)."""
    index = min(int(relative * CURVE_POINTS), CURVE_POINTS - 1)
    span = profile.a_tp - profile.a_fp
    x = _X[index]
    return float(span / 2 * -1 * np.tanh(x) / np.tanh(np.pi / 2) + span / 2 + profile.a_fp)


@dataclass(frozen=True)
class NabFile:
    """What the NAB score needs of one file."""

    windows: int
    positions: tuple[float, ...]
    """The relative position of the first detection of each detected window."""
    false_positives: int

    def raw(self, profile: Profile) -> float:
        """S of the file, summed as tsad does: false positives, false negatives, then each
        true positive's worth in window order."""
        total = 0.0
        total += profile.a_fp * self.false_positives
        total += profile.a_fn * (self.windows - len(self.positions))
        for position in self.positions:
            total += curve(position, profile)
        return total


@dataclass(frozen=True)
class NabTally:
    """The files scored so far; add tallies with ``+``. Files are kept apart only so that the
    sums run in tsad's order (per file, then across files) and round alike."""

    files: tuple[NabFile, ...] = ()

    def __add__(self, other: NabTally) -> NabTally:
        return NabTally(self.files + other.files)

    @property
    def windows(self) -> int:
        return sum(f.windows for f in self.files)

    @property
    def detected(self) -> int:
        return sum(len(f.positions) for f in self.files)

    @property
    def missed(self) -> int:
        return self.windows - self.detected

    @property
    def false_positives(self) -> int:
        return sum(f.false_positives for f in self.files)

    def raw(self, profile: Profile) -> float:
        return sum((f.raw(profile) for f in self.files), 0.0)

    def score(self, profile: Profile) -> float:
        """100 · (S - S_null) / (S_perfect - S_null); NaN without a window."""
        null = self.windows * profile.a_fn
        perfect = self.windows * profile.a_tp
        if perfect == null:
            return math.nan
        return 100 * (self.raw(profile) - null) / (perfect - null)


def nab_tally(
    changepoints_ms: npt.ArrayLike, detections_ms: npt.ArrayLike, width_ms: int = SKAB_WINDOW_MS
) -> NabTally:
    """One file: labelled changepoint times against detection times (both epoch ms)."""
    windows = right_windows(changepoints_ms, width_ms)
    detections = np.sort(_times(detections_ms, "detections"))
    inside = np.zeros(detections.size, dtype=bool)
    positions = []
    for left, right in windows:
        first = int(np.searchsorted(detections, left, side="left"))
        end = int(np.searchsorted(detections, right, side="right"))
        inside[first:end] = True
        if end > first:
            positions.append(float((detections[first] - left) / (right - left)))
    return NabTally((NabFile(len(windows), tuple(positions), int((~inside).sum())),))
