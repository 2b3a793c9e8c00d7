"""What a detector returns for a batch: a score per row and what the score is about."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from fleetwatch.models.calibration import ALERT_SCORE, score_from_surprise

FloatArray = npt.NDArray[np.float64]


class Reason(IntEnum):
    NONE = 0
    WARMUP = 1
    DEVIATION = 2
    SHIFT_UP = 3
    SHIFT_DOWN = 4
    FLATLINE = 5
    DROPOUT = 6
    PATTERN = 7
    EARLY = 8
    """A deviation judged while the stream's own tail is still short (a provisional threshold)."""


VALUE_REASONS = (Reason.DEVIATION, Reason.SHIFT_UP, Reason.SHIFT_DOWN, Reason.PATTERN)
"""What a row's score says when a member judged its value against what it knows of the stream
(not warming up, not a provisional judgement of a young stream, and not the flat-line member's
view of stuck values and gaps)."""
_JUDGES_VALUE = np.isin(np.arange(256), VALUE_REASONS)


def judges_value(reason: npt.NDArray[np.int8]) -> npt.NDArray[np.bool_]:
    """Per row, whether its reason is one of :data:`VALUE_REASONS` (a table lookup: the scorer
    asks it of every member's scores of every device batch)."""
    out: npt.NDArray[np.bool_] = _JUDGES_VALUE[reason.astype(np.uint8)]
    return out


@dataclass(frozen=True)
class Scores:
    """Per-row arrays, aligned with the rows of the batch that was scored.

    ``surprise`` is ``-ln p`` of the row's statistic under the detector's model of normal and
    ``score`` its calibrated map into [0, 1] (see :mod:`calibration`). ``metric``, ``observed``,
    ``expected``, ``band`` and ``reason`` explain the score; ``detector`` names the kind that
    produced it (for the combined detector, the member that was most surprised).
    """

    score: FloatArray
    surprise: FloatArray
    metric: npt.NDArray[np.object_]
    observed: FloatArray
    expected: FloatArray
    band: FloatArray
    reason: npt.NDArray[np.int8]
    detector: npt.NDArray[np.object_]

    @classmethod
    def build(
        cls,
        kind: str,
        surprise: FloatArray,
        metric: npt.NDArray[np.object_],
        observed: FloatArray,
        expected: FloatArray,
        band: FloatArray,
        reason: npt.NDArray[np.int8],
    ) -> Scores:
        surprise = np.maximum(surprise, 0.0)
        detector = np.full(surprise.shape, kind, dtype=object)
        return cls(
            score_from_surprise(surprise),
            surprise,
            metric,
            observed,
            expected,
            band,
            reason,
            detector,
        )

    def __len__(self) -> int:
        return int(self.score.size)

    @property
    def alert(self) -> npt.NDArray[np.bool_]:
        out: npt.NDArray[np.bool_] = self.score >= ALERT_SCORE
        return out

    def take(self, index: npt.NDArray[np.intp]) -> Scores:
        return Scores(*(getattr(self, f)[index] for f in _FIELDS))

    def explain(self, row: int) -> str:
        """One sentence on why row ``row`` scored as it did."""
        reason = Reason(int(self.reason[row]))
        metric = str(self.metric[row])
        obs, exp, band = self.observed[row], self.expected[row], self.band[row]
        p = math.exp(-float(self.surprise[row]))
        tail = f"p≈{p:.2g}, {self.detector[row]}"
        if reason == Reason.EARLY:
            return f"{metric}={obs:.6g} outside expected {exp:.6g}±{band:.4g} (new stream, {tail})"
        if reason == Reason.DEVIATION:
            return f"{metric}={obs:.6g} outside expected {exp:.6g}±{band:.4g} ({tail})"
        if reason in (Reason.SHIFT_UP, Reason.SHIFT_DOWN):
            way = "up" if reason == Reason.SHIFT_UP else "down"
            return f"{metric}={obs:.6g}: level shifted {way} from {exp:.6g}±{band:.4g} ({tail})"
        if reason == Reason.FLATLINE:
            flat = f"window range {obs:.4g}, noise sd {band:.4g}"
            return f"{metric} flat at {exp:.6g}: {flat} ({tail})"
        if reason == Reason.DROPOUT:
            return f"gap of {obs:.0f} ms, typical {exp:.0f} ms, limit {band:.0f} ms ({tail})"
        if reason == Reason.PATTERN:
            joint = f"expected {exp:.6g}±{band:.4g} from the other metrics"
            return f"{metric}={obs:.6g} breaks the joint pattern: {joint} ({tail})"
        if reason == Reason.WARMUP:
            return f"{metric}: still warming up, not scored"
        return f"{metric}={obs:.6g} within normal ({tail})"

    def explanations(self, rows: npt.NDArray[np.bool_] | None = None) -> list[str]:
        """Explanations for the selected rows (default: the alerting rows), formatted lazily so
        that scoring never pays for strings of quiet rows."""
        chosen = self.alert if rows is None else rows
        return [self.explain(int(i)) for i in np.flatnonzero(chosen)]


_FIELDS = ("score", "surprise", "metric", "observed", "expected", "band", "reason", "detector")


def quiet_scores(kind: str, names: npt.NDArray[np.object_], value: FloatArray) -> Scores:
    """All-zero scores (rows not scored, reason WARMUP) for a batch."""
    n = value.size
    nan = np.full(n, np.nan)
    return Scores.build(
        kind, np.zeros(n), names, value, nan, nan.copy(), np.full(n, Reason.WARMUP, np.int8)
    )
