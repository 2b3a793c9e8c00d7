"""Device kinds: what each kind of sensor measures and how its normal behaviour looks.

Generation is vectorised: one call computes a whole tick's readings for every due device of a
kind, as a ``(readings, metrics)`` array. Values are pure functions of (seed, device, seq, ts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from fleetwatch.simulator.randomness import F64, normal, uniform

I64 = npt.NDArray[np.int64]
DAY_MS = 24 * 3600 * 1000
HOUR_MS = 3600 * 1000
TAU = 2.0 * np.pi

# random streams (distinct per purpose so draws never collide)
_PHASE, _PERIOD, _LEVEL, _NOISE_A, _NOISE_B = 11, 12, 13, 21, 22


class Generator(Protocol):
    def __call__(self, seed: int, device: I64, seq: I64, ts: I64) -> F64: ...


@dataclass(frozen=True)
class Kind:
    name: str
    metrics: tuple[str, ...]
    scales: tuple[float, ...]
    """Typical spread of each metric: anomaly magnitudes are multiples of it."""
    decimals: tuple[int, ...]
    generate: Generator

    @property
    def payload_template(self) -> bytes:
        """The wire payload with placeholders: seq, ts, sent, then one per metric."""
        fields = ",".join(f'"{m}":%.{d}f' for m, d in zip(self.metrics, self.decimals, strict=True))
        return ('{"v":1,"seq":%d,"ts":%d,"sent":%d,"metrics":{' + fields + "}}").encode()


def _phase(seed: int, device: I64) -> F64:
    return TAU * uniform(seed, _PHASE, device, 0)


def temperature(seed: int, device: I64, seq: I64, ts: I64) -> F64:
    """21 °C with a ±2 °C daily cycle and 0.3 °C noise; humidity falls as it warms."""
    daily = 2.0 * np.sin(TAU * (ts % DAY_MS) / DAY_MS + _phase(seed, device))
    temp = 21.0 + daily + 0.3 * normal(seed, _NOISE_A, device, seq)
    humidity = 55.0 - 2.0 * (temp - 21.0) + 1.0 * normal(seed, _NOISE_B, device, seq)
    return np.column_stack([temp, humidity])


def vibration(seed: int, device: I64, seq: I64, ts: I64) -> F64:
    """A machine that runs 60% of a 20-60 minute cycle: vibration and speed follow the regime."""
    period = (20 + 40 * uniform(seed, _PERIOD, device, 0)) * 60_000
    on = ((ts + uniform(seed, _PHASE, device, 0) * period) % period) < 0.6 * period
    n1, n2 = normal(seed, _NOISE_A, device, seq), normal(seed, _NOISE_B, device, seq)
    rms = np.where(on, 4.0 + 0.3 * n1, 0.15 + 0.03 * np.abs(n1))
    rpm = np.where(on, 1480.0 + 4.0 * n2, 0.0)
    return np.column_stack([rms, rpm])


def power(seed: int, device: I64, seq: I64, ts: I64) -> F64:
    """A load cycle of 10-30 minutes; voltage sags under load, current is power over voltage."""
    period = (10 + 20 * uniform(seed, _PERIOD, device, 0)) * 60_000
    load = 0.5 + 0.4 * np.sin(TAU * ts / period + _phase(seed, device))
    load = load + 0.03 * normal(seed, _NOISE_A, device, seq)
    watts = 800.0 + 1500.0 * load
    volts = 230.0 - 4.0 * load + 0.5 * normal(seed, _NOISE_B, device, seq)
    return np.column_stack([watts, volts, watts / volts])


def battery(seed: int, device: I64, seq: I64, ts: I64) -> F64:
    """Charge decays 0.5-2 %/hour from 100 % to 15 %, then the battery is recharged."""
    rate = 0.5 + 1.5 * uniform(seed, _PERIOD, device, 0)
    used = (ts / HOUR_MS * rate + 85.0 * uniform(seed, _LEVEL, device, 0)) % 85.0
    soc = 100.0 - used
    volts = 3.3 + 0.9 * soc / 100.0 + 0.005 * normal(seed, _NOISE_A, device, seq)
    return np.column_stack([volts, soc + 0.2 * normal(seed, _NOISE_B, device, seq)])


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("temperature", ("temperature", "humidity"), (2.0, 4.0), (3, 2), temperature),
        Kind("vibration", ("vibration_rms", "rpm"), (1.0, 50.0), (3, 1), vibration),
        Kind("power", ("power_w", "voltage", "current_a"), (400.0, 2.0, 2.0), (1, 2, 3), power),
        Kind("battery", ("battery_v", "soc_pct"), (0.05, 3.0), (4, 2), battery),
    )
}
