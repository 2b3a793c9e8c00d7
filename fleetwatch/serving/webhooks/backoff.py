"""Retry delays: exponential from ``base_s``, capped at ``cap_s``, with equal jitter (half
fixed, half random), so retries spread out but never come back early."""

from __future__ import annotations

import random


def retry_delay_s(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """The wait after failed attempt number ``attempt`` (1 for the first attempt)."""
    ceiling = min(cap_s, base_s * 2.0 ** min(attempt - 1, 62))
    return float(ceiling / 2 + rng.uniform(0, ceiling / 2))
