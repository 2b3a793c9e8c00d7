"""Per-device clock offsets, estimated robustly from the last readings' (received - sent).

A device's clock may be minutes or hours off. For each reading the gateway knows when the
device says it sent it (device clock) and when it arrived (gateway clock); their difference is
the clock offset plus the network delay. The running median over the last ``window`` readings
ignores the occasional slow delivery or a reading flushed from a buffer, and the corrected event
time is ``ts + offset``. Estimates live in the gateway process: after a restart they rebuild from
the first reading on (one sample is already a usable estimate).
"""

from __future__ import annotations

from bisect import insort
from collections import deque


class ClockOffsets:
    def __init__(self, window: int = 31, max_devices: int = 1_000_000) -> None:
        self.window = window
        self.max_devices = max_devices
        self._recent: dict[str, deque[int]] = {}
        self._sorted: dict[str, list[int]] = {}

    def observe(self, device_id: str, sent_ms: int, received_ms: int) -> int:
        """Add one sample and return the device's current offset estimate (ms)."""
        sample = received_ms - sent_ms
        recent = self._recent.get(device_id)
        if recent is None:
            if len(self._recent) >= self.max_devices:
                self._forget_oldest()
            recent = self._recent[device_id] = deque()
            self._sorted[device_id] = []
        ordered = self._sorted[device_id]
        if len(recent) == self.window:
            ordered.remove(recent.popleft())
        recent.append(sample)
        insort(ordered, sample)
        return self._median(ordered)

    def offset(self, device_id: str) -> int | None:
        ordered = self._sorted.get(device_id)
        return self._median(ordered) if ordered else None

    @staticmethod
    def _median(ordered: list[int]) -> int:
        n = len(ordered)
        mid = n // 2
        return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) // 2

    def _forget_oldest(self) -> None:
        oldest = next(iter(self._recent))
        del self._recent[oldest]
        del self._sorted[oldest]
