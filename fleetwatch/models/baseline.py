"""The fixed baseline: a band around a configured centre per metric.

The simplest honest detector, and the first one the scorer runs. A reading of a configured
metric is anomalous when it lies outside ``center ± band``. Its score rises from 0 at the
band's edge towards 1 with the distance (``1 - band/|deviation|``) so that scores keep their
ranking instead of saturating.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fleetwatch.contracts.errors import ConfigurationError
from fleetwatch.models.errors import HyperParameterError

PARAMS_SCHEMA = 1
SMALL = 16
"""Up to this many pairs are scored in plain floats (:meth:`FixedBaseline.score_each`)."""
_NAN = float("nan")
_UNKNOWN = (_NAN, _NAN)


class BandScore(NamedTuple):
    """One (metric, value) pair's figures: :class:`BandScores`' of one row."""

    expected: float
    band: float
    score: float
    anomalous: bool


@dataclass(frozen=True)
class BandScores:
    expected: npt.NDArray[np.float64]
    band: npt.NDArray[np.float64]
    score: npt.NDArray[np.float64]
    anomalous: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class FixedBaseline:
    bands: Mapping[str, tuple[float, float]]
    """metric -> (center, band half-width)."""
    version: int = 0
    kind: str = "fixed-baseline"

    def __post_init__(self) -> None:
        for metric, (_, width) in self.bands.items():
            if not width > 0:
                raise HyperParameterError(f"baseline band for {metric!r} must be > 0, got {width}")

    def score(self, metrics: npt.ArrayLike, values: npt.ArrayLike) -> BandScores:
        """Score many (metric, value) pairs at once; unknown metrics score 0 and never alert."""
        names = np.asarray(metrics, dtype=object)
        vals = np.asarray(values, dtype=np.float64)
        if vals.ndim == 1 and len(vals) <= SMALL:
            return _arrays(self.score_each(names.tolist(), vals.tolist()))
        expected = np.full(vals.shape, np.nan)
        band = np.full(vals.shape, np.nan)
        for metric, (center, width) in self.bands.items():
            hit = names == metric
            expected[hit] = center
            band[hit] = width
        deviation = np.abs(vals - expected)
        known = ~np.isnan(expected)
        anomalous = known & (deviation > band)
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(anomalous, 1.0 - band / deviation, 0.0)
        return BandScores(expected, band, score, anomalous)

    def score_each(self, names: Iterable[Any], vals: Iterable[float]) -> list[BandScore]:
        """:meth:`score` pair by pair in plain floats, the same figures: a live micro-batch
        hands it a reading or two of a device, where numpy's cost per call is most of the
        work."""
        scored = []
        for name, value in zip(names, vals, strict=True):
            center, width = self.bands.get(name, _UNKNOWN)
            deviation = abs(value - center)
            out = deviation > width  # False when either is NaN
            scored.append(BandScore(center, width, 1.0 - width / deviation if out else 0.0, out))
        return scored

    def to_params(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "schema": PARAMS_SCHEMA,
            "version": self.version,
            "bands": {m: [c, w] for m, (c, w) in sorted(self.bands.items())},
        }

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FixedBaseline:
        if params.get("kind") != "fixed-baseline" or params.get("schema") != PARAMS_SCHEMA:
            raise ConfigurationError(f"not fixed-baseline v{PARAMS_SCHEMA} parameters: {params!r}")
        bands = {m: (float(c), float(w)) for m, (c, w) in params["bands"].items()}
        return cls(bands=bands, version=int(params["version"]))


def _arrays(scored: list[BandScore]) -> BandScores:
    """Pairs' figures (:meth:`FixedBaseline.score_each`) as columns."""
    return BandScores(
        np.array([s.expected for s in scored], dtype=np.float64),
        np.array([s.band for s in scored], dtype=np.float64),
        np.array([s.score for s in scored], dtype=np.float64),
        np.array([s.anomalous for s in scored], dtype=np.bool_),
    )
