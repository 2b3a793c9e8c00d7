"""A reproducible run: the fleet, its anomalies and its misbehaviour, loadable from TOML.

A scenario file has top-level fleet keys and two optional tables::

    devices = 200
    kinds = { temperature = 2, vibration = 1, power = 1, battery = 1 }
    rate = 1.0          # readings per second per device
    duration_s = 600    # or count = 500 (readings per device); neither: until Ctrl-C
    seed = 7
    qos = 1

    [anomalies]
    per_device_hour = 2.0
    mix = { spike = 1, dip = 1, level_shift = 1, drift = 1, stuck = 1, noise_burst = 1,
            dropout = 1, correlated = 1 }

    [misbehaviour]
    skewed_fraction = 0.1           # devices whose clock is off by 1 min .. 3 h
    offline_per_device_hour = 0.5   # offline periods that buffer and flush out of order
    duplicate_rate = 0.001
    malformed_rate = 0.001

Options given on the command line override the file.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetwatch.simulator.errors import ScenarioError
from fleetwatch.simulator.kinds import KINDS

ANOMALY_KINDS = (
    "spike",
    "dip",
    "level_shift",
    "drift",
    "stuck",
    "noise_burst",
    "dropout",
    "correlated",
)


def _weights(given: dict[str, float], known: tuple[str, ...], what: str) -> dict[str, float]:
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ScenarioError(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    if any(not math.isfinite(w) or w < 0 for w in given.values()) or sum(given.values()) <= 0:
        raise ScenarioError(f"{what} weights must be non-negative with a positive sum")
    return {k: float(given[k]) for k in known if given.get(k, 0) > 0}


def _fraction(value: float, name: str) -> None:
    if not 0.0 <= value <= 1.0:
        raise ScenarioError(f"{name} must be between 0 and 1, got {value}")


@dataclass(frozen=True)
class AnomalySpec:
    per_device_hour: float = 0.0
    """Expected anomalies per device per hour of event time (0: none)."""
    mix: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ANOMALY_KINDS, 1.0))
    spike_every: int = 0
    """Every Nth reading of the fleet (1-based, round by round) is a spike; 0 for none."""
    spike_size: float = 25.0
    warmup_s: float = 0.0
    """No anomaly starts in a device's first ``warmup_s`` seconds (its models' warm-up)."""

    def __post_init__(self) -> None:
        if self.per_device_hour < 0 or self.spike_every < 0 or self.warmup_s < 0:
            raise ScenarioError("anomaly rates and the warm-up must not be negative")
        object.__setattr__(self, "mix", _weights(self.mix, ANOMALY_KINDS, "anomaly kind"))


@dataclass(frozen=True)
class MisbehaviourSpec:
    skewed_fraction: float = 0.0
    skew_s: tuple[float, float] = (60.0, 3 * 3600.0)
    offline_per_device_hour: float = 0.0
    offline_s: tuple[float, float] = (20.0, 300.0)
    duplicate_rate: float = 0.0
    malformed_rate: float = 0.0

    def __post_init__(self) -> None:
        for name in ("skewed_fraction", "duplicate_rate", "malformed_rate"):
            _fraction(getattr(self, name), name)
        if self.offline_per_device_hour < 0:
            raise ScenarioError("offline_per_device_hour must not be negative")
        for name in ("skew_s", "offline_s"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ScenarioError(f"{name} must be [low, high] with 0 <= low <= high")
        object.__setattr__(self, "skew_s", tuple(self.skew_s))
        object.__setattr__(self, "offline_s", tuple(self.offline_s))


@dataclass(frozen=True)
class Scenario:
    devices: int = 3
    kinds: dict[str, float] = field(default_factory=lambda: {"temperature": 1.0})
    rate: float = 2.0
    """Readings per second per device (until a set_interval command changes it)."""
    count: int | None = None
    """Readings per device; with ``duration_s`` unset too, the run goes on until stopped."""
    duration_s: float | None = None
    seed: int = 0
    qos: int = 1
    prefix: str = "sensor"
    workers: int = 1
    """Publisher processes, each with its own MQTT connection and a share of the devices."""
    reboot_s: float = 5.0
    """How long a device stays silent after a reboot command."""
    anomalies: AnomalySpec = field(default_factory=AnomalySpec)
    misbehaviour: MisbehaviourSpec = field(default_factory=MisbehaviourSpec)

    def __post_init__(self) -> None:
        if self.devices < 1 or self.workers < 1:
            raise ScenarioError("devices and workers must be at least 1")
        if not 0 < self.rate <= 1000:
            raise ScenarioError("rate must be in (0, 1000] readings per second per device")
        if self.qos not in (0, 1):
            raise ScenarioError("qos must be 0 or 1")
        if (self.count is not None and self.count < 1) or (
            self.duration_s is not None and self.duration_s <= 0
        ):
            raise ScenarioError("count and duration_s must be positive")
        object.__setattr__(self, "kinds", _weights(self.kinds, tuple(KINDS), "device kind"))

    @property
    def interval_ms(self) -> int:
        return max(1, round(1000 / self.rate))

    def device_id(self, index: int) -> str:
        return f"{self.prefix}-{index:04d}"

    def with_overrides(self, **overrides: Any) -> Scenario:
        """A copy with every override that is not None applied (command-line options)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        anomalies = {k: given.pop(k) for k in ("per_device_hour", "spike_every") if k in given}
        try:
            return dataclasses.replace(
                self, anomalies=dataclasses.replace(self.anomalies, **anomalies), **given
            )
        except TypeError as exc:
            raise ScenarioError(str(exc)) from exc


def load_scenario(path: Path) -> Scenario:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"cannot read scenario {path}: {exc}") from exc
    return scenario_from_dict(data)


def scenario_from_dict(data: dict[str, Any]) -> Scenario:
    data = dict(data)
    try:
        anomalies = AnomalySpec(**data.pop("anomalies", {}))
        misbehaviour = MisbehaviourSpec(**data.pop("misbehaviour", {}))
        return Scenario(**data, anomalies=anomalies, misbehaviour=misbehaviour)
    except TypeError as exc:
        raise ScenarioError(f"scenario: {exc}") from exc


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    return dataclasses.asdict(scenario)
