"""Percentile bootstrap intervals over independent units (files, devices), by
:func:`scipy.stats.bootstrap`.

A figure of a corpus (F1 from summed counts, an average precision over pooled rows) is
recomputed on resamples of its units drawn with replacement, and the interval is the
resamples' percentiles. Resampling units rather than rows keeps the dependence between the rows
of one recording inside its unit. The generator is seeded, so an interval is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt
from scipy.stats import bootstrap

from fleetwatch.evaluation.errors import EvaluationError

Unit = TypeVar("Unit")

RESAMPLES = 2000
"""Resamples per interval: a 95 % interval's lower end then rests on 50 of them."""


def interval(
    units: Sequence[Unit],
    figure: Callable[[Sequence[Unit]], float],
    level: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """The ``level`` percentile-bootstrap interval of ``figure`` over ``units`` (NaN ends when
    fewer than two units, or every resample's figure is undefined)."""
    if not 0 < level < 1:
        raise EvaluationError(f"level must be in (0, 1), got {level}")
    if len(units) < 2:
        return (math.nan, math.nan)

    def of(indexes: npt.NDArray[np.float64]) -> float:
        return figure([units[int(i)] for i in indexes])

    result = bootstrap(
        (np.arange(len(units), dtype=np.float64),),
        of,
        vectorized=False,
        n_resamples=resamples,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    ci = result.confidence_interval
    return (float(ci.low), float(ci.high))
