"""Wait for an observable outcome with a deadline — never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(probe: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.25) -> T:
    """Call ``probe`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    last: T = probe()
    while not last:
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})"
            )
        time.sleep(interval_s)
        last = probe()
    return last
