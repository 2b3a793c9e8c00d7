"""Whether a count of false alerts holds a budget: an exact Poisson interval on a rate.

False alerts on normal data arrive as a Poisson count over the exposure (device-days). A few
device-days cannot tell a rate from its budget: at a budget of 1 a day, 3 device-days expect 3
alerts, and a detector exactly on budget shows 4 or more a third of the time. So a rate is
reported with its exact (Garwood) interval, from the χ² quantiles of the count
(:func:`scipy.stats.chi2`), and a budget is *broken* only where the whole interval lies above
it, *held* where the whole interval lies at or below it, and *undecided* otherwise: the exposure
is too short to say.
"""

from __future__ import annotations

from typing import Literal

from scipy.stats import chi2

from fleetwatch.evaluation.errors import EvaluationError

Verdict = Literal["held", "broken", "undecided"]


def rate_interval(count: int, exposure: float, level: float = 0.95) -> tuple[float, float]:
    """The exact ``level`` interval of a Poisson rate, ``count`` events over ``exposure`` units
    (device-days): the χ² quantiles ``chi2(a/2, 2k)/2`` to ``chi2(1-a/2, 2k+2)/2``, with
    ``a = 1 - level``, over the exposure."""
    if count < 0 or exposure <= 0 or not 0 < level < 1:
        raise EvaluationError(
            f"a rate needs a count >= 0, an exposure > 0 and a level in (0, 1), got "
            f"{count}, {exposure}, {level}"
        )
    alpha = 1.0 - level
    low = 0.0 if count == 0 else float(chi2.ppf(alpha / 2, 2 * count)) / 2
    high = float(chi2.ppf(1 - alpha / 2, 2 * count + 2)) / 2
    return low / exposure, high / exposure


def verdict(count: int, exposure: float, budget: float, level: float = 0.95) -> Verdict:
    """``broken``: the rate's interval lies above ``budget``; ``held``: at or below it;
    ``undecided``: it straddles the budget (more exposure would decide)."""
    low, high = rate_interval(count, exposure, level)
    if low > budget:
        return "broken"
    return "held" if high <= budget else "undecided"
