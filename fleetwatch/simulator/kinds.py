"""Device kinds: what each kind of sensor measures and how its normal behaviour looks.

Generation is vectorised: one call computes a whole tick's readings for every due device of a
kind, as a ``(readings, metrics)`` array, from the call's
:class:`~fleetwatch.simulator.noise.Draws`. Values are pure functions of (seed, device, seq, ts)
and the kind's :class:`~fleetwatch.simulator.noise.Noise`. Each kind has a realistic default
noise (:attr:`Kind.noise`); a scenario may change it, or ask for plain Gaussian noise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fleetwatch.simulator.noise import I64, Draws, Noise, decimals
from fleetwatch.simulator.randomness import F64, uniform

DAY_MS = 24 * 3600 * 1000
HOUR_MS = 3600 * 1000
TAU = 2.0 * np.pi

# random streams (distinct per purpose so draws never collide; a wander uses two)
_PHASE, _PERIOD, _LEVEL, _NOISE_A, _NOISE_B = 11, 12, 13, 21, 22
_WALK_A, _WALK_B = 41, 43


class Generator(Protocol):
    def __call__(self, d: Draws) -> F64: ...


@dataclass(frozen=True)
class Kind:
    name: str
    metrics: tuple[str, ...]
    scales: tuple[float, ...]
    """Typical spread of each metric: anomaly magnitudes and noise sizes are multiples of it."""
    decimals: tuple[int, ...]
    """Decimals on the wire of a metric that is not rounded to a resolution."""
    errors: tuple[float, ...]
    """Standard deviation of each metric's per-reading error (outside bursts): what a stuck
    value visibly stops, when the metric's resolution is finer."""
    generate: Generator
    noise: Noise
    """The realistic default."""

    def payload_template(self, resolution: Mapping[str, float] | None = None) -> bytes:
        """The wire payload with placeholders: seq, ts, sent, then one per metric."""
        steps = resolution or {}
        places = [
            decimals(steps.get(m, 0.0), d) for m, d in zip(self.metrics, self.decimals, strict=True)
        ]
        fields = ",".join(f'"{m}":%.{d}f' for m, d in zip(self.metrics, places, strict=True))
        return ('{"v":1,"seq":%d,"ts":%d,"sent":%d,"metrics":{' + fields + "}}").encode()


def _phase(seed: int, device: I64) -> F64:
    return TAU * uniform(seed, _PHASE, device, 0)


def temperature(d: Draws) -> F64:
    """21 °C with a ±2 °C daily cycle and 0.3 °C noise; humidity falls as it warms.

    The room's temperature and the air's humidity each wander; a benign level change is the
    thermostat's setpoint moving (humidity follows the temperature)."""
    seed, device, ts = d.seed, d.device, d.ts
    daily = 2.0 * np.sin(TAU * (ts % DAY_MS) / DAY_MS + _phase(seed, device))
    temp = 21.0 + daily + 0.3 * d.error(_NOISE_A) + 2.0 * d.offset(_WALK_A)
    humidity = 55.0 - 2.0 * (temp - 21.0) + 1.0 * d.error(_NOISE_B) + 4.0 * d.walk(_WALK_B)
    return np.column_stack([temp, humidity])


def vibration(d: Draws) -> F64:
    """A machine that runs 60% of a 20-60 minute cycle: vibration and speed follow the regime.

    While it runs, its vibration and speed wander (wear, load) and a benign level change is a
    new speed setpoint, which vibrates more or less with it."""
    seed, device, ts = d.seed, d.device, d.ts
    period = (20 + 40 * uniform(seed, _PERIOD, device, 0)) * 60_000
    on = ((ts + uniform(seed, _PHASE, device, 0) * period) % period) < 0.6 * period
    n1, n2 = d.error(_NOISE_A), d.error(_NOISE_B)
    rms = np.where(on, 4.0 + 0.3 * n1 + 1.0 * d.offset(_WALK_A), 0.15 + 0.03 * np.abs(n1))
    rpm = np.where(on, 1480.0 + 4.0 * n2 + 50.0 * (d.walk(_WALK_B) + d.level), 0.0)
    return np.column_stack([rms, rpm])


def power(d: Draws) -> F64:
    """A load cycle of 10-30 minutes; voltage sags under load, current is power over voltage.

    The load wanders and switches (a benign level change: an appliance on or off); the grid's
    voltage wanders on its own."""
    seed, device, ts = d.seed, d.device, d.ts
    period = (10 + 20 * uniform(seed, _PERIOD, device, 0)) * 60_000
    load = 0.5 + 0.4 * np.sin(TAU * ts / period + _phase(seed, device))
    load = load + 0.03 * d.error(_NOISE_A) + (400.0 / 1500.0) * d.offset(_WALK_A)
    watts = 800.0 + 1500.0 * load
    volts = 230.0 - 4.0 * load + 0.5 * d.error(_NOISE_B) + 2.0 * d.walk(_WALK_B)
    return np.column_stack([watts, volts, watts / volts])


def battery(d: Draws) -> F64:
    """Charge decays 0.5-2 %/hour from 100 % to 15 %, then the battery is recharged.

    Its voltage wanders with temperature; a benign level change is a new steady load (its
    voltage sags or recovers)."""
    seed, device, ts = d.seed, d.device, d.ts
    rate = 0.5 + 1.5 * uniform(seed, _PERIOD, device, 0)
    used = (ts / HOUR_MS * rate + 85.0 * uniform(seed, _LEVEL, device, 0)) % 85.0
    soc = 100.0 - used
    volts = 3.3 + 0.9 * soc / 100.0 + 0.005 * d.error(_NOISE_A) + 0.05 * d.offset(_WALK_A)
    return np.column_stack([volts, soc + 0.2 * d.error(_NOISE_B)])


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "temperature",
            ("temperature", "humidity"),
            (2.0, 4.0),
            (3, 2),
            (0.3, 1.0),
            temperature,
            # a room probe: 0.1 °C and 0.1 %RH steps, a slowly wandering room, mild outliers
            Noise(
                df=6.0,
                walk=0.25,
                walk_minutes=30.0,
                jitter=0.05,
                resolution={"temperature": 0.1, "humidity": 0.1},
            ),
        ),
        Kind(
            "vibration",
            ("vibration_rms", "rpm"),
            (1.0, 50.0),
            (3, 1),
            (0.3, 4.0),
            vibration,
            # an accelerometer: heavy-tailed shocks, noisy spells (a passing forklift)
            Noise(
                df=4.0,
                walk=0.1,
                walk_minutes=30.0,
                bursts_per_hour=3.0,
                burst_s=(10.0, 60.0),
                burst_gain=2.5,
                jitter=0.02,
                resolution={"vibration_rms": 0.01, "rpm": 1.0},
            ),
        ),
        Kind(
            "power",
            ("power_w", "voltage", "current_a"),
            (400.0, 2.0, 2.0),
            (1, 2, 3),
            (45.0, 0.5, 0.2),
            power,
            # a meter: loads switching on and off (± 400 W), 1 W / 0.1 V / 10 mA steps
            Noise(
                df=5.0,
                walk=0.1,
                walk_minutes=15.0,
                level_changes_per_hour=2.0,
                level_change=1.0,
                bursts_per_hour=1.0,
                burst_s=(10.0, 60.0),
                burst_gain=2.0,
                jitter=0.01,
                resolution={"power_w": 1.0, "voltage": 0.1, "current_a": 0.01},
            ),
        ),
        Kind(
            "battery",
            ("battery_v", "soc_pct"),
            (0.05, 3.0),
            (4, 2),
            (0.005, 0.2),
            battery,
            # a fuel gauge: mV and whole per cent, a low-power timer that wakes irregularly
            Noise(
                df=6.0,
                walk=0.2,
                walk_minutes=30.0,
                bursts_per_hour=0.5,
                burst_s=(5.0, 30.0),
                burst_gain=2.0,
                jitter=0.1,
                resolution={"battery_v": 0.001, "soc_pct": 1.0},
            ),
        ),
    )
}
