"""The wall clock in the wire's unit: telemetry and event times are UTC epoch milliseconds."""

from __future__ import annotations

import time


def now_ms() -> int:
    """The current time in epoch milliseconds."""
    return time.time_ns() // 1_000_000
