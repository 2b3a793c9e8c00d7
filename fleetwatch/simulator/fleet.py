"""Deterministic readings for a small fleet of temperature sensors, with labelled spikes."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class SimReading:
    device_id: str
    seq: int
    ts: int
    metrics: dict[str, float]
    spike: bool


@dataclass(frozen=True)
class FleetSpec:
    devices: int = 3
    prefix: str = "sensor"
    seed: int = 0
    spike_every: int = 0
    """Every Nth reading of the fleet (1-based) is an extreme spike; 0 for none."""
    spike_size: float = 25.0
    center: float = 21.0
    amplitude: float = 2.0
    noise: float = 0.3

    def device_ids(self) -> list[str]:
        return [f"{self.prefix}-{i:04d}" for i in range(self.devices)]


def readings(
    spec: FleetSpec, start_ms: int, interval_ms: int, rounds: int | None
) -> Iterator[SimReading]:
    """One reading per device per round, at ``start_ms + round * interval_ms``.

    ``rounds=None`` runs forever. The same spec and start give the same sequence."""
    rng = random.Random(spec.seed)
    phases = {d: rng.uniform(0, 2 * math.pi) for d in spec.device_ids()}
    n = 0
    round_ = 0
    while rounds is None or round_ < rounds:
        ts = start_ms + round_ * interval_ms
        for device_id in spec.device_ids():
            n += 1
            daily = spec.amplitude * math.sin(
                2 * math.pi * (ts % DAY_MS) / DAY_MS + phases[device_id]
            )
            value = spec.center + daily + rng.gauss(0.0, spec.noise)
            spike = spec.spike_every > 0 and n % spec.spike_every == 0
            if spike:
                value += spec.spike_size
            yield SimReading(device_id, round_, ts, {"temperature": round(value, 3)}, spike)
        round_ += 1
