"""Per-device rate limits: a token bucket for each device's telemetry messages, so that one
device publishing as fast as it can takes its own share of the gateway and no more.

A bucket holds up to ``burst`` tokens and each message takes one. Tokens come back at ``rate``
a second of the *device's* clock: the span between the ``sent`` times of its messages. A
backlog the broker held while the gateway or Kafka was away arrives all at once, but it was
published at the device's pace, and it is counted at that pace; counted on arrival, it would
be dead-lettered as a flood.

A device's clock is its own word, so it is held to the gateway's (monotonic) clock. The
device's *lead* is how far its clock has run ahead of the gateway's: for an honest device, the
age of the backlog being delivered; for a device lying about its clock, what it has claimed.
The lead may reach ``backlog_s`` (the longest backlog counted at its publish pace) and shrinks
by :data:`DRIFT` of the gateway's time, so a lying device gains at most ``backlog_s * rate``
messages once and ``DRIFT * rate`` a second beyond its rate. A clock stepping back refills
nothing and takes nothing off the lead. A message without a ``sent`` time (one the gateway rejects
anyway) is counted on the gateway's clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

PRUNE_EVERY = 65_536
"""Messages between sweeps that drop the buckets of devices gone quiet long enough to hold
nothing the limiter needs (a full bucket and no lead is the same as none), so memory follows
the active fleet."""

DRIFT = 0.1
"""How much faster than the gateway's a device's clock may run for good: real clocks drift by
parts per million, and 10 % over a device's rate is inside the margin its rate already has over
a device's normal pace (``gateway.device_rate`` is ten times a device reporting every second)."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    seen_s: float
    """When its last message arrived (gateway clock)."""
    sent_s: float | None
    """Its last message's ``sent`` time (device clock)."""
    lead_s: float = 0.0


class DeviceRates:
    """Token buckets by device id; ``clock`` gives the gateway's time in seconds (monotonic)."""

    def __init__(
        self,
        rate: float,
        burst: float,
        backlog_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a device's rate must be positive and its burst at least 1")
        if backlog_s < 0:
            raise ValueError("a device's backlog must not be negative")
        self.rate = rate
        self.burst = burst
        self.backlog_s = backlog_s
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._until_prune = PRUNE_EVERY

    def admit(self, device_id: str, sent_ms: int | None = None) -> bool:
        """Whether ``device_id`` may send one more message, sent at ``sent_ms`` on its own
        clock (and take its token)."""
        now = self.clock()
        sent_s = None if sent_ms is None else sent_ms / 1000.0
        bucket = self._buckets.get(device_id)
        if bucket is None:
            bucket = self._buckets[device_id] = _Bucket(self.burst, now, sent_s)
        else:
            self._refill(bucket, now, sent_s)
        admitted = bucket.tokens >= 1.0
        if admitted:
            bucket.tokens -= 1.0
        self._until_prune -= 1
        if self._until_prune <= 0:
            self._prune(now)
        return admitted

    def _refill(self, bucket: _Bucket, now: float, sent_s: float | None) -> None:
        waited = max(0.0, now - bucket.seen_s)
        bucket.seen_s = now
        if sent_s is None or bucket.sent_s is None:
            elapsed = waited
        else:
            # the device's time since its latest message, up to what its lead has left
            allowed = (1.0 + DRIFT) * waited + self.backlog_s - bucket.lead_s
            elapsed = min(max(0.0, sent_s - bucket.sent_s), allowed)
        if sent_s is not None:
            bucket.sent_s = sent_s  # a clock stepped back counts on from where it is now
        bucket.lead_s = max(0.0, bucket.lead_s + elapsed - (1.0 + DRIFT) * waited)
        bucket.tokens = min(self.burst, bucket.tokens + elapsed * self.rate)

    def __len__(self) -> int:
        return len(self._buckets)

    def _prune(self, now: float) -> None:
        refill_s = self.burst / self.rate
        self._buckets = {
            device: b
            for device, b in self._buckets.items()
            if now - b.seen_s < refill_s or b.lead_s > DRIFT * (now - b.seen_s)
        }
        self._until_prune = PRUNE_EVERY
