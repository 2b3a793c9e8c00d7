"""A reproducible run: the fleet, its anomalies and its misbehaviour, loadable from TOML.

A scenario file has top-level fleet keys and three optional tables::

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

    [noise]                         # optional: each kind's realistic noise is the default
    jitter = 0.05                   # a knob here applies to every kind …
    [noise.power]                   # … and here to one kind (see fleetwatch/simulator/noise.py)
    level_changes_per_hour = 4.0
    resolution = { power_w = 10.0 }

``noise = "gaussian"`` (or ``model = "gaussian"`` in the ``[noise]`` table, whose knobs then
apply over plain Gaussian noise) draws plain Gaussian noise: every component of the realistic
noise off, as :class:`~fleetwatch.simulator.noise.Noise`'s defaults are.

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
from fleetwatch.simulator.noise import KNOBS, Noise, merged

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


NOISE_MODELS = ("realistic", "gaussian")


@dataclass(frozen=True)
class NoiseSpec:
    """Which noise each kind draws: its realistic default (or plain Gaussian noise, ``model``),
    with knobs changed for every kind (``common``) and per kind (``by_kind``)."""

    model: str = "realistic"
    common: dict[str, Any] = field(default_factory=dict)
    by_kind: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.model not in NOISE_MODELS:
            raise ScenarioError(
                f"noise must be one of {', '.join(NOISE_MODELS)}, not {self.model!r}"
            )
        unknown = sorted(set(self.by_kind) - set(KINDS))
        if unknown:
            raise ScenarioError(f"noise for unknown device kind: {', '.join(unknown)}")
        metrics = {m for k in KINDS.values() for m in k.metrics}
        for given in (self.common, *self.by_kind.values()):
            steps = given.get("resolution", {})
            if not isinstance(steps, dict):
                raise ScenarioError("noise resolution must be a table of metric = step")
            strays = sorted(set(steps) - metrics)
            if strays:
                raise ScenarioError(f"noise resolution for unknown metric: {', '.join(strays)}")
        for name in KINDS:
            self.of(name)  # every knob checked once, at load

    def of(self, kind: str) -> Noise:
        """The noise of ``kind``'s devices."""
        base = KINDS[kind].noise if self.model == "realistic" else Noise()
        own = KINDS[kind].metrics
        common = dict(self.common)
        if "resolution" in common:
            common["resolution"] = {m: v for m, v in common["resolution"].items() if m in own}
        mine = self.by_kind.get(kind, {})
        strays = sorted(set(mine.get("resolution", {})) - set(own))
        if strays:
            raise ScenarioError(f"noise.{kind}: {', '.join(strays)} is not a {kind} metric")
        return merged(merged(base, common), mine)

    @classmethod
    def from_table(cls, value: Any) -> NoiseSpec:
        """A scenario's ``noise``: a model's name, or a table of model, knobs and kind tables."""
        if isinstance(value, NoiseSpec):
            return value
        if isinstance(value, str):
            return cls(model=value)
        if not isinstance(value, dict):
            raise ScenarioError("noise must be a model's name or a table")
        table = dict(value)
        model = table.pop("model", "realistic")
        by_kind = {k: table.pop(k) for k in list(table) if k in KINDS}
        unknown = sorted(set(table) - set(KNOBS))
        if unknown:
            known = ", ".join(("model", *KNOBS, *KINDS))
            raise ScenarioError(f"unknown noise setting: {', '.join(unknown)} (known: {known})")
        if not all(isinstance(v, dict) for v in by_kind.values()):
            raise ScenarioError("noise.<kind> must be a table of knobs")
        return cls(model=model, common=table, by_kind=by_kind)

    def to_table(self) -> dict[str, Any]:
        """The scenario file's ``[noise]`` table that gives this spec."""
        return {"model": self.model, **self.common, **self.by_kind}


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
    noise: NoiseSpec = field(default_factory=NoiseSpec)
    """Each kind's realistic noise unless the scenario says otherwise."""

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
        object.__setattr__(self, "noise", NoiseSpec.from_table(self.noise))

    @property
    def interval_ms(self) -> int:
        return max(1, round(1000 / self.rate))

    def device_id(self, index: int) -> str:
        return f"{self.prefix}-{index:04d}"

    def with_overrides(self, **overrides: Any) -> Scenario:
        """A copy with every override that is not None applied (command-line options; ``noise``
        as in a scenario file: a model's name or a table)."""
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
        noise = NoiseSpec.from_table(data.pop("noise", "realistic"))
        return Scenario(**data, anomalies=anomalies, misbehaviour=misbehaviour, noise=noise)
    except TypeError as exc:
        raise ScenarioError(f"scenario: {exc}") from exc


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    """The scenario as a scenario file's tables (``scenario_from_dict`` reads it back)."""
    return dataclasses.asdict(scenario) | {"noise": scenario.noise.to_table()}
