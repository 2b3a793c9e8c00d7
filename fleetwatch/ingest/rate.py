"""Per-device rate limits: a token bucket for each device's telemetry messages, so that one
device publishing as fast as it can takes its own share of the gateway and no more.

A bucket holds up to ``burst`` tokens and refills at ``rate`` tokens a second; each message
takes one. A message that finds the bucket empty is refused before it is parsed (the gateway
dead-letters it with the reason), so a flood costs the gateway a dictionary lookup a message.
"""

from __future__ import annotations

import time
from collections.abc import Callable

PRUNE_EVERY = 65_536
"""Messages between sweeps that drop the buckets of devices gone quiet long enough to be full
again (a full bucket is the same as none), so memory follows the active fleet."""


class DeviceRates:
    """Token buckets by device id; ``clock`` gives seconds (monotonic)."""

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a device's rate must be positive and its burst at least 1")
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        """device id → (tokens, when they were counted)."""
        self._until_prune = PRUNE_EVERY

    def admit(self, device_id: str) -> bool:
        """Whether ``device_id`` may send one more message now (and take its token)."""
        now = self.clock()
        tokens, at = self._buckets.get(device_id, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        admitted = tokens >= 1.0
        self._buckets[device_id] = (tokens - 1.0 if admitted else tokens, now)
        self._until_prune -= 1
        if self._until_prune <= 0:
            self._prune(now)
        return admitted

    def __len__(self) -> int:
        return len(self._buckets)

    def _prune(self, now: float) -> None:
        refill_s = self.burst / self.rate
        self._buckets = {d: b for d, b in self._buckets.items() if now - b[1] < refill_s}
        self._until_prune = PRUNE_EVERY
